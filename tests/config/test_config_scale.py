"""``broker check`` is linear in the size of the configuration (issue 14: 40k topics took 103 s).

The figure itself is a benchmark (``python bench/bench_config.py``); here a generous bound and the
ratio between a tenth of the topics and all of them, which is about 10 when linear and about 100 when
quadratic (each element's path used to count its siblings).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.bench_config import check_seconds, write_config
from broker.cli import main


@pytest.mark.slow
def test_check_of_40k_topics_takes_seconds_and_grows_linearly(tmp_path: Path) -> None:
    small = check_seconds(write_config(tmp_path, 4_000))
    large = check_seconds(write_config(tmp_path, 40_000))
    assert large < 60, f"checking 40,000 topics took {large:.1f} s"
    assert large / small < 30, f"10x the topics took {large / small:.1f}x the time (linear is about 10)"


def test_paths_of_many_siblings_are_indexed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The cached element paths give the same indexes as counting (the 3,000th topic is Topic[3000])."""
    path = write_config(tmp_path, 3_000)
    text = path.read_text().replace("<Name>topic-2999</Name>", "<Name>topic-2999</Name><Bogus>1</Bogus>")
    path.write_text(text)
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "/AMPSConfig/SOW/Topic[3000]/Bogus" in err
