"""The codec is a pure layer with a pinned public surface and a documented key table."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import broker.protocol
from broker.protocol import FIELDS

DOCS = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"


def test_importing_the_codec_pulls_in_neither_trio_nor_the_server() -> None:
    code = "import sys, broker.protocol; print(','.join(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    modules = set(result.stdout.strip().split(","))
    assert "trio" not in modules
    assert not [m for m in modules if m.startswith(("trio.", "broker.server", "broker.engine"))]
    ours = {m for m in modules if m == "broker" or m.startswith("broker.")}
    # broker.speedups: the compiled twins of hot-path encoders (pure layers too) and the switch that picks them.
    assert {m for m in ours if not m.startswith(("broker.protocol", "broker.speedups"))} == {"broker", "broker.errors"}


def test_public_surface_is_pinned() -> None:
    assert sorted(broker.protocol.__all__) == sorted(
        [
            "ACK_BITS", "CLOSED", "DEFAULT_MAX_FRAME_SIZE", "FIELDS", "HEARTBEAT_FRAME", "NEED_DATA", "AckType",
            "Command", "Connection", "ConnectionStatistics", "DeliveryBatch", "DeliveryRun", "DeliveryTemplate", "FieldSpec", "Frame", "Header", "LocalProtocolError",
            "OofReason", "ProtocolError", "Reason", "RemoteProtocolError", "Sentinel", "Status", "decode_frame",
            "decode_header", "decode_sow_batch", "encode_ack", "encode_frame", "encode_group_begin",
            "encode_group_end", "encode_header", "encode_oof", "encode_publish", "encode_sow_batch", "encode_sow_parts",
            "encode_sow_records", "escape_string", "parse_ack_types",
        ]
    )  # fmt: skip
    for name in broker.protocol.__all__:
        assert getattr(broker.protocol, name) is not None


def test_field_table_is_consistent() -> None:
    accepted = [key for f in FIELDS for key in f.accept]
    assert len(accepted) == len(set(accepted)), "a key maps to two fields"
    emitted = [f.emit for f in FIELDS]
    assert len(emitted) == len(set(emitted))
    # Names the official client misreads must never be emitted (amps-protocol.md §1.4).
    assert not {"sow_key", "password", "msg_len", "timestamp", "correlation_id", "v", "f"} & set(emitted)
    header_attrs = {name for name in vars(broker.protocol.Header) if not name.startswith("_")}
    assert {f.name for f in FIELDS} <= header_attrs


def test_every_field_is_documented_with_its_keys() -> None:
    text = DOCS.read_text(encoding="utf-8")
    for f in FIELDS:
        row = re.search(rf"^\| `{f.name}` \|.*$", text, re.M)
        assert row, f"docs/protocol.md has no row for {f.name}"
        cells = [c.strip() for c in row.group(0).strip("|").split("|")]
        assert cells[1] == f.kind
        assert cells[2] == ", ".join(f"`{k}`" for k in f.accept)
        assert cells[3] == f"`{f.emit}`"
