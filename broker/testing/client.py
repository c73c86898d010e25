"""Helpers over the official AMPS Python client (``amps-python-client``, in the ``test`` extra) for tests
that query a broker the way a user does."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def sow_stream(client: Any, topic: str, *, timeout_ms: int = 10_000, ack_types: tuple[str, ...] = (),
               **fields: Any) -> Iterator[Any]:
    """Run a ``sow`` with the client's Command API and yield every message of its stream.

    Args:
        client: A connected, logged-on ``AMPS.Client``.
        topic: The topic (or regex) to query.
        timeout_ms: How long to wait for each message.
        ack_types: Extra acks to ask for (``"stats"``, ...).
        **fields: Command fields by the name of their setter (``filter``, ``options``, ``top_n``,
            ``order_by``, ``batch_size``, ``bookmark``, ``sow_keys``, ``query_id``, ...); ``None`` leaves
            a field unset.

    Yields:
        Each message (convert it before the next: the client may reuse it).

    Raises:
        AssertionError: A message did not come within ``timeout_ms``.
    """
    import AMPS

    cmd = AMPS.Command("sow").set_topic(topic)
    for name, value in fields.items():
        if value is not None:
            getattr(cmd, f"set_{name}")(value)
    for ack_type in ack_types:
        cmd.add_ack_type(ack_type)
    for count, message in enumerate(client.execute(cmd).timeout(timeout_ms)):
        if message is None:
            raise AssertionError(f"sow on {topic!r} timed out after {count} messages")
        yield message
