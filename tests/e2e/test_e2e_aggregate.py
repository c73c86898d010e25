"""Aggregated SOW queries through the official AMPS client (issue 16, acceptance 2): grouping by one and two
fields, every aggregate function, a filter applied before grouping, and a historical aggregate; each answer
checked against values the test computes from what it published."""

from __future__ import annotations

import datetime as dt
import json
import math
import random
import statistics
import time

import AMPS
import pytest

from broker.testing.client import sow_stream
from broker.testing.process import BrokerProcess

pytestmark = pytest.mark.timeout(60)

SOW = """
<Topic><Name>trades</Name><MessageType>json</MessageType><Key>/id</Key><FileName>./sow/%n.sow</FileName>
  <History><Window>1h</Window></History></Topic>
<Topic><Name>xtrades</Name><MessageType>xml</MessageType><Key>/T/id</Key><Durability>transient</Durability></Topic>
"""
REGIONS = ["eu", "us", "apac"]
DESKS = ["fx", "rates"]


def stamp(t_ns: int) -> str:
    return dt.datetime.fromtimestamp(t_ns / 1e9, dt.UTC).strftime("%Y%m%dT%H%M%S.%f")


def aggregate(client: AMPS.Client, topic: str, grouping: str, projection: str, *, filter: str | None = None,
              bookmark: str | None = None, order_by: str | None = None, top_n: int | None = None) -> list[dict]:
    return [m.get_data() for m in sow_stream(client, topic, batch_size=10,
                                             options=f"grouping={grouping},projection={projection}",
                                             filter=filter, bookmark=bookmark, order_by=order_by, top_n=top_n)
            if m.get_command() == "sow"]


def rows(data: list[str]) -> list[dict]:
    return [json.loads(d) for d in data]


def expected_groups(records: list[dict], fields: tuple[str, ...]) -> dict[tuple, list[dict]]:
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault(tuple(r[f] for f in fields), []).append(r)
    return groups


@pytest.fixture(scope="module")
def agg_broker(tmp_path_factory: pytest.TempPathFactory):
    proc = BrokerProcess.from_xml(tmp_path_factory.mktemp("aggregate"), sow=SOW).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def published(agg_broker):
    """200 trades, then 60 of them updated after a recorded time (the historical aggregate's point)."""
    rnd = random.Random(16)
    client = AMPS.Client(f"agg-loader-{time.monotonic_ns()}")
    client.connect(agg_broker.uri)
    client.logon(5000)
    state: dict[int, dict] = {}
    for i in range(200):
        state[i] = {"id": i, "region": rnd.choice(REGIONS), "desk": rnd.choice(DESKS),
                    "qty": rnd.randint(1, 1000), "px": round(rnd.uniform(10, 200), 2)}
        if i % 17 == 0:
            del state[i]["px"]  # a NULL for the aggregates to skip
        client.publish("trades", json.dumps(state[i]))
    client.publish_flush(5000)
    t = time.time_ns()
    before = {k: dict(v) for k, v in state.items()}
    while time.time_ns() <= t + 1000:
        pass
    for i in range(0, 200, 10):
        state[i]["qty"] += 5000
        client.publish("trades", json.dumps(state[i]))
    client.execute(AMPS.Command("sow_delete").set_topic("trades").set_filter("/id < 5")).timeout(5000)
    for i in range(5):
        del state[i]
    client.publish_flush(5000)
    client.close()
    return {"now": list(state.values()), "before": list(before.values()), "t": t + 1000}


ALL = ("[/region, COUNT(/id) AS /n, COUNT_DISTINCT(/desk) AS /desks, SUM(/qty) AS /qty, AVG(/px) AS /avg_px, "
       "MIN(/px) AS /min_px, MAX(/qty) AS /max_qty, STDDEV_POP(/qty) AS /sd_pop, STDDEV_SAMP(/qty) AS /sd_samp, "
       "SUM(/qty * /px) / SUM(/qty) AS /vwap_ish, COUNT(/px) AS /priced]")


def check_all(got: list[dict], records: list[dict]) -> None:
    groups = expected_groups(records, ("region",))
    assert {g["region"] for g in got} == {k[0] for k in groups}
    assert len(got) == len(groups)
    for g in got:
        rs = groups[(g["region"],)]
        qty = [r["qty"] for r in rs]
        px = [r["px"] for r in rs if "px" in r]
        assert g["n"] == len(rs)
        assert g["desks"] == len({r["desk"] for r in rs})
        assert g["qty"] == sum(qty)
        assert g["avg_px"] == pytest.approx(sum(px) / len(px))
        assert g["min_px"] == min(px)
        assert g["max_qty"] == max(qty)
        assert g["sd_pop"] == pytest.approx(statistics.pstdev(qty))
        assert g["sd_samp"] == pytest.approx(statistics.stdev(qty))
        priced = [r for r in rs if "px" in r]
        # NULL px makes qty * px NULL for that record; SUM skips it, the divisor does not.
        assert g["vwap_ish"] == pytest.approx(sum(r["qty"] * r["px"] for r in priced) / sum(qty))
        assert g["priced"] == len(px)


def test_every_aggregate_function_grouped_by_one_field(agg_broker, client_factory, published) -> None:
    client = client_factory(agg_broker.uri)
    check_all(rows(aggregate(client, "trades", "[/region]", ALL)), published["now"])


def test_grouping_by_two_fields_with_order_and_top_n(agg_broker, client_factory, published) -> None:
    client = client_factory(agg_broker.uri)
    got = rows(aggregate(client, "trades", "[/region,/desk]",
                         "[/region, /desk, SUM(/qty) AS /total, COUNT(/id) AS /n]"))
    groups = expected_groups(published["now"], ("region", "desk"))
    assert {(g["region"], g["desk"]): (g["total"], g["n"]) for g in got} == {
        k: (sum(r["qty"] for r in rs), len(rs)) for k, rs in groups.items()}
    top = rows(aggregate(client, "trades", "[/region,/desk]", "[/region, /desk, SUM(/qty) AS /total]",
                         order_by="/total DESC", top_n=2))
    totals = sorted((sum(r["qty"] for r in rs) for rs in groups.values()), reverse=True)
    assert [g["total"] for g in top] == totals[:2]


def test_filter_applies_before_grouping(agg_broker, client_factory, published) -> None:
    client = client_factory(agg_broker.uri)
    got = rows(aggregate(client, "trades", "[/desk]", "[/desk, SUM(/qty) AS /total, MAX(/px) AS /max_px]",
                         filter="/region = 'eu' AND /qty < 3000"))
    chosen = [r for r in published["now"] if r["region"] == "eu" and r["qty"] < 3000]
    groups = expected_groups(chosen, ("desk",))
    assert {g["desk"]: g["total"] for g in got} == {k[0]: sum(r["qty"] for r in rs) for k, rs in groups.items()}
    assert {g["desk"]: g["max_px"] for g in got} == {
        k[0]: max(r["px"] for r in rs if "px" in r) for k, rs in groups.items()}


def test_historical_aggregate(agg_broker, client_factory, published) -> None:
    client = client_factory(agg_broker.uri)
    check_all(rows(aggregate(client, "trades", "[/region]", ALL, bookmark=stamp(published["t"]))),
              published["before"])
    assert published["before"] != published["now"]


def test_grouping_without_projection_or_the_reverse_is_an_error(agg_broker, client_factory, published) -> None:
    client = client_factory(agg_broker.uri)
    for options, says in (("grouping=[/region]", "projection is missing"),
                          ("projection=[/region]", "grouping is missing"),
                          ("grouping=[/region],projection=[SUM(/qty)]", "needs a name"),
                          ("grouping=[/region],projection=[SUM(SUM(/qty)) AS /x]", "inside another aggregate")):
        with pytest.raises(AMPS.InvalidOptionsException):
            list(client.execute(AMPS.Command("sow").set_topic("trades").set_options(options)).timeout(5000))
        assert says in agg_broker.log()  # the broker's log line says what is wrong
    # The connection and other clients carry on.
    assert len(rows(aggregate(client, "trades", "[/desk]", "[/desk, COUNT(/id) AS /n]"))) == len(DESKS)


def test_xml_aggregate(agg_broker, client_factory) -> None:
    client = client_factory(agg_broker.uri.replace("/json", "/xml"))
    values = {i: (("a", "b")[i % 2], i * 3) for i in range(30)}
    for i, (g, q) in values.items():
        client.publish("xtrades", f"<T><id>{i}</id><g>{g}</g><q>{q}</q></T>")
    client.publish_flush(5000)
    got = aggregate(client, "xtrades", "[/T/g]", "[/T/g, SUM(/T/q) AS /T/total, MAX(/T/q) AS /T/max]")
    parsed = {}
    from lxml import etree
    for d in got:
        root = etree.fromstring(d.encode())
        parsed[root.findtext("g")] = (float(root.findtext("total")), float(root.findtext("max")))
    assert parsed == {g: (float(sum(q for gg, q in values.values() if gg == g)),
                          float(max(q for gg, q in values.values() if gg == g))) for g in ("a", "b")}
    assert not math.isnan(parsed["a"][0])
