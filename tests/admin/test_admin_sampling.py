"""Admin statistics are sampled once per ``<Admin><Interval>`` and served from that sample (issue 14):
concurrent requests share one sample and one rendering, request paths are bounded, and the sampler
keeps its interval on a fixed grid and ten minutes of history (issue 33; the real broker's interval:
test_admin_kernel_sampling.py)."""

from __future__ import annotations

import gzip
from dataclasses import replace

import pytest
import trio
import trio.testing

from broker.admin import StatisticsSampler
from broker.admin.amps_tree import CLIENT_SLICE, AmpsTreeBuilder
from broker.admin.app import MAX_PATH_BYTES, MAX_PATH_SEGMENTS, MAX_QUERY_BYTES
from broker.admin.console import history_points
from broker.admin.sampler import HISTORY_SECONDS, history_length
from broker.stats.snapshot import ClientStats

from .conftest import SyntheticSource

pytestmark = pytest.mark.timeout(60)


def _many_clients(source, count: int) -> None:
    source.current = replace(source.current, clients=tuple(
        ClientStats(id=f"c{i}", client_name=f"client-{i}", remote=f"127.0.0.1:{i}", connected_at=1_700_000_000.0,
                    messages_in=1, messages_out=1, bytes_in=1, bytes_out=1, subscriptions=1, queued_bytes=0)
        for i in range(count)
    ))


async def test_concurrent_requests_share_one_sample_and_one_rendering(admin_port, source, sampler, http,
                                                                      monkeypatch) -> None:
    source.frozen = True
    _many_clients(source, 2000)
    builds = []
    real_build = AmpsTreeBuilder.build_sliced

    async def counted_build(self, snap):  # noqa: ANN001, ANN202
        builds.append(1)
        return await real_build(self, snap)

    monkeypatch.setattr(AmpsTreeBuilder, "build_sliced", counted_build)
    replies = []

    async def get(path: str) -> None:
        replies.append(await http(f"http://127.0.0.1:{admin_port}{path}"))

    async with trio.open_nursery() as nursery:
        for i in range(50):
            nursery.start_soon(get, "/amps.json" if i % 2 else "/metrics")
    assert [r.status for r in replies] == [200] * 50
    assert len(source.served) == 1, "50 requests must read one sample, not take 50"
    assert len(builds) == 1, "the /amps tree is built once per sample, whatever the number of requests"
    assert {r.headers["x-statistics-sample"] for r in replies} == {"1"}
    tree = next(r for r in replies if r.headers["content-type"] == "application/json").json()
    assert len(tree["amps"]["instance"]["clients"]) == 2000

    await sampler.sample()
    again = await http(f"http://127.0.0.1:{admin_port}/amps.json")
    assert again.headers["x-statistics-sample"] == "2" and len(builds) == 2


async def test_the_tree_is_built_in_slices_and_equals_the_one_step_build(source) -> None:
    source.frozen = True
    _many_clients(source, 2000)
    snapshot = source()
    steps = 0
    done = trio.Event()
    result = {}

    async def count() -> None:  # runs once per checkpoint the sliced build gives the event loop
        nonlocal steps
        while not done.is_set():
            steps += 1
            await trio.sleep(0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(count)
        result["tree"] = await AmpsTreeBuilder(clock=lambda: 1_800_000_000.0).build_sliced(snapshot)
        done.set()
    assert steps >= 2 * 2000 // CLIENT_SLICE, "the client rows are built a slice per loop step"
    whole = AmpsTreeBuilder(clock=lambda: 1_800_000_000.0).build(snapshot)
    sliced = result["tree"]
    for tree in (whole, sliced):  # the host and process samples differ between two builds
        tree["amps"].pop("host")
        tree["amps"]["instance"].pop("memory")
    assert sliced == whole and len(sliced["amps"]["instance"]["clients"]) == 2000


async def test_gzip_bodies_are_compressed_once_per_sample(admin_port, source, http) -> None:
    source.frozen = True
    _many_clients(source, 500)
    url = f"http://127.0.0.1:{admin_port}"
    plain = await http(url + "/amps.json")
    compressed = [await http(url + "/amps.json", headers={"Accept-Encoding": "gzip"}) for _ in range(3)]
    assert {r.headers.get("content-encoding") for r in compressed} == {"gzip"}
    assert {r.body for r in compressed} == {compressed[0].body}, "served from the cache, byte for byte"
    assert gzip.decompress(compressed[0].body) == plain.body and len(compressed[0].body) < len(plain.body) // 5
    metrics = await http(url + "/metrics", headers={"Accept-Encoding": "gzip"})
    assert b"broker_clients_connected" in gzip.decompress(metrics.body)


async def test_request_paths_and_query_strings_are_bounded(admin_port, source, http) -> None:
    base = f"http://127.0.0.1:{admin_port}"
    long_path = await http(base + "/amps/" + "x" * MAX_PATH_BYTES + ".json")
    assert long_path.status == 414 and f"longer than {MAX_PATH_BYTES} bytes" in long_path.text
    deep = await http(base + "/amps" + "/a" * 7000 + ".json"[: MAX_PATH_BYTES])
    assert deep.status in (400, 414)
    segments = await http(base + "/amps" + "/a" * (MAX_PATH_SEGMENTS + 1) + ".json")
    assert segments.status == 400 and f"more than {MAX_PATH_SEGMENTS} segments" in segments.text
    query = await http(base + "/metrics?name[]=" + "b" * MAX_QUERY_BYTES)
    assert query.status == 414 and "Query string longer" in query.text
    assert len(source.served) == 0, "a refused request reads no statistics"
    # At the bounds, requests are served.
    ok = await http(base + "/amps" + "/a" * (MAX_PATH_SEGMENTS - 2) + ".json")
    assert ok.status == 404 and "No statistic at" in ok.text
    assert (await http(base + "/amps/instance/name.json")).status == 200


def test_the_sampler_samples_once_per_interval() -> None:
    taken: list[float] = []

    async def main() -> None:
        sampler = StatisticsSampler(lambda: taken.append(trio.current_time()) or {}, interval=2.0)
        async with trio.open_nursery() as nursery:
            await nursery.start(sampler.run)
            await trio.sleep(9.5)
            assert sampler.generation == 5
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert [round(t - taken[0], 3) for t in taken] == [0.0, 2.0, 4.0, 6.0, 8.0]


def test_an_interval_below_one_second_is_raised_to_it() -> None:
    assert StatisticsSampler(dict, interval=0.01).interval == 1.0


def test_samples_start_on_a_fixed_grid_when_a_sample_is_slow() -> None:
    """A sample that takes 1.5 s of a 2 s interval does not push the next one back (the period stays 2 s, not
    3.5 s); one that takes 3 s skips the grid point it overran (4 s apart, never back to back)."""

    def run(work: float) -> tuple[list[float], StatisticsSampler]:
        started: list[float] = []

        async def slow_source() -> dict:
            started.append(trio.current_time())
            await trio.sleep(work)
            return {}

        sampler = StatisticsSampler(slow_source, interval=2.0, clock=trio.current_time)

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                await nursery.start(sampler.run)  # returns when the first sample is done
                await trio.sleep(7.9)
                nursery.cancel_scope.cancel()

        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
        return [round(t - started[0], 3) for t in started], sampler

    starts, sampler = run(1.5)
    assert starts == [0.0, 2.0, 4.0, 6.0, 8.0] and sampler.late == 0 and sampler.duration == 1.5
    starts, sampler = run(3.0)
    assert starts == [0.0, 4.0, 8.0] and sampler.late == 2


def test_the_history_keeps_ten_minutes_of_totals_in_a_bounded_ring() -> None:
    source = SyntheticSource()  # messages_received grows by 7 per sample, messages_delivered by 11
    sampler = StatisticsSampler(source, interval=2.0, clock=trio.current_time, wall_clock=trio.current_time)
    assert sampler.history.maxlen == history_length(2.0) == 301
    assert history_length(1.0) == 601 and history_length(10.0) == 61

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(sampler.run)
            await trio.sleep(1001.0)  # samples at 0, 2, ... 1000 (no tie with the one at 1000)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert sampler.generation == 501 and len(source.served) == 501
    assert len(sampler.history) == 301, "bounded: the oldest samples fell off"
    oldest, newest = sampler.history[0], sampler.history[-1]
    assert newest.taken_at - oldest.taken_at == pytest.approx(HISTORY_SECONDS)
    assert newest.messages_received == source.current.counters.messages_received
    chart = history_points(sampler.history, sampler.interval)
    assert chart["interval_setting"] == 2.0 and len(chart["points"]) == 300
    assert {(p["in"], p["out"]) for p in chart["points"]} == {(3.5, 5.5)}
    assert chart["points"][-1]["taken_at"] == sampler.taken_at, "the live state's taken_at matches the last point"
