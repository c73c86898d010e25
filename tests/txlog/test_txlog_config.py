"""``<TransactionLog><DamagedRecords>``: stop (default) or skip, and a located error for anything else."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import ConfigError, load_config


def _config(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "config.xml"
    path.write_text(f"""<AMPSConfig>
<Name>damage-test</Name>
<TransactionLog><JournalDirectory>{tmp_path}/j</JournalDirectory>{extra}
<Topic><Name>t</Name><MessageType>json</MessageType></Topic></TransactionLog>
</AMPSConfig>
""")
    return path


@pytest.mark.parametrize(("extra", "policy"), [("", "stop"), ("<DamagedRecords>skip</DamagedRecords>", "skip"),
                                               ("<DamagedRecords>Stop</DamagedRecords>", "stop")])
def test_damaged_records_policy(tmp_path: Path, extra: str, policy: str) -> None:
    config = load_config(_config(tmp_path, extra), env={})
    assert config.transaction_log is not None
    assert config.transaction_log.damaged_records == policy


def test_damaged_records_bad_value_is_located(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(_config(tmp_path, "\n<DamagedRecords>truncate</DamagedRecords>"), env={})
    text = "\n".join(map(str, caught.value.issues))
    assert "DamagedRecords must be stop or skip, not 'truncate'" in text and ":4" in text
