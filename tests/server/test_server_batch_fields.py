"""broker/speedups/batchfields.pyx against its pure-Python twins in :mod:`broker.server.publish_batch`: the same
publish messages, accepted headers, refusals (entitlement, sequence jumps) and checks called, in the same order,
and the same failures picked from the engine's results, on arbitrary headers (absent fields, every ack text,
sequences in and out of order, checks that refuse) and on frames whose header is not a plain ``Header``."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker import speedups
from broker.errors import CommandError, StorageError
from broker.protocol import Frame, Header
from broker.server import publish_batch

batchfields = speedups.load("batchfields")
pytestmark = pytest.mark.skipif(batchfields is None, reason="broker.speedups.batchfields is not built")

TEXT = st.one_of(st.none(), st.sampled_from(["", "orders", "o", "processed", "persisted", "x,y"]))
HEADERS = st.builds(lambda c, t, s, a, k, x, e, cid: Header(command=c, topic=t, seq=s, ack_type=a, sow_key=k,
                                                             correlation_id=x, expiration=e, cmd_id=cid),
                    st.sampled_from([None, "p", "publish", "delta_publish"]), TEXT,
                    st.one_of(st.none(), st.integers(0, 12), st.integers(2**63, 2**64 + 5)), TEXT, TEXT, TEXT,
                    st.one_of(st.none(), st.integers(0, 5), st.just("soon")), st.one_of(st.none(), st.just("1")))


class Subheader(Header):
    """A header that is not exactly ``Header`` (read through its attributes)."""

    @property
    def topic(self) -> Any:  # type: ignore[override]
        return "from-a-property"


class Checks:
    """Entitlement and sequence checks that record their calls and refuse some."""

    def __init__(self, refuse_topic: str | None, jump: int | None) -> None:
        self.calls: list[Any] = []
        self.refuse_topic = refuse_topic
        self.jump = jump

    def entitled(self, command: str, header: Header) -> None:
        self.calls.append(("entitled", command, header.topic))
        if header.topic == self.refuse_topic:
            raise CommandError("not entitled", f"topic {header.topic!r}")

    def check_sequence(self, seq: Any, high: int) -> None:
        self.calls.append(("check", seq, high))
        if self.jump is not None and seq - high > self.jump:
            raise CommandError("invalid sequence", f"{seq} after {high}")


def _outcome(fn: Any, frames: list[Frame], grants: bool, refuse_topic: str | None, jump: int | None) -> Any:
    checks = Checks(refuse_topic, jump)
    messages: list[Any] = []
    accepted: list[Any] = []
    refused: dict[int, Any] = {}
    acked = fn(frames, checks.entitled if grants else None, checks.check_sequence, messages, accepted, refused)
    return (acked, messages, [id(h) for h in accepted], {n: (type(e).__name__, str(e)) for n, e in refused.items()},
            checks.calls)


def _not_interned(header: Header) -> Header:
    """The same header with keys that are equal to the canonical names but other objects."""
    return Header._from_dict({"".join(list(name)): value for name, value in header.__dict__.items()})


@settings(max_examples=400)
@given(headers=st.lists(st.tuples(HEADERS, st.sampled_from(["Header", "subclass", "keys not interned"])),
                        max_size=10),
       grants=st.booleans(), refuse_topic=TEXT, jump=st.one_of(st.none(), st.integers(0, 4)))
def test_a_batch_reads_the_same_messages_compiled_and_in_python(headers: list[tuple[Header, str]], grants: bool,
                                                                 refuse_topic: str | None, jump: int | None) -> None:
    made = {"Header": lambda h: h, "subclass": lambda h: Subheader._from_dict(dict(h.__dict__)),
            "keys not interned": _not_interned}
    frames = [Frame(made[kind](h), b'{"n":%d}' % n) for n, (h, kind) in enumerate(headers)]
    compiled = _outcome(batchfields.batch_messages, frames, grants, refuse_topic, jump)
    assert compiled == _outcome(publish_batch._batch_messages_python, frames, grants, refuse_topic, jump)
    # Whether a header asks for an ack is what the session's answer loop checks.
    assert compiled[0] == any(frames[i].header.ack_type for i in range(len(frames)) if i not in compiled[3])


@given(results=st.lists(st.one_of(st.integers(-1, 2**70), st.just(True),
                                  st.builds(CommandError, st.just("r")), st.builds(StorageError, st.just("s")))))
def test_the_same_failures_are_picked_compiled_and_in_python(results: list[Any]) -> None:
    assert batchfields.failures(results) == publish_batch._failures_python(results)
