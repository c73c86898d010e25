"""How ``broker check`` scales with the size of a configuration.

Run: ``python bench/bench_config.py [--topics 40000]``. Generates configurations with a tenth of the
topics and with all of them (each topic both a SOW topic and a transaction-log topic), loads each the way
``broker check`` does and prints the seconds and their ratio: a linear check gives about 10, a quadratic
one about 100. :func:`write_config` is also the generator of tests/config/test_config_scale.py.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from broker.config import load_config


def config_text(topics: int) -> str:
    """An AMPS configuration with ``topics`` SOW topics, each also recorded in the transaction log."""
    parts = [
        "<AMPSConfig>",
        "<Name>scale</Name>",
        # The generated file is larger than the 5MB default guard against include loops.
        "<ConfigCycleDetectionThreshold>1GB</ConfigCycleDetectionThreshold>",
        "<Transports><Transport><Name>json-tcp</Name><Type>tcp</Type><InetAddr>9007</InetAddr>"
        "<Protocol>amps</Protocol><MessageType>json</MessageType></Transport></Transports>",
        "<SOW>",
    ]
    parts.extend(
        f"<Topic><Name>topic-{i}</Name><MessageType>json</MessageType><Key>/id</Key>"
        "<FileName>./sow/%n.sow</FileName></Topic>"
        for i in range(topics)
    )
    parts.append("</SOW><TransactionLog><JournalDirectory>./journal</JournalDirectory>")
    parts.extend(f"<Topic><Name>topic-{i}</Name><MessageType>json</MessageType></Topic>" for i in range(topics))
    parts.append("</TransactionLog></AMPSConfig>")
    return "\n".join(parts) + "\n"


def write_config(directory: Path, topics: int) -> Path:
    """Write :func:`config_text` of ``topics`` topics to ``directory``; returns the file."""
    path = directory / f"scale-{topics}.xml"
    path.write_text(config_text(topics), encoding="utf-8")
    return path


def check_seconds(path: Path) -> float:
    """Seconds to load and validate ``path`` (what ``broker check`` does before printing)."""
    t0 = time.perf_counter()
    config = load_config(path, env={})
    elapsed = time.perf_counter() - t0
    assert config.sow_topics, "the generated configuration has SOW topics"
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=40_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        small = check_seconds(write_config(Path(tmp), args.topics // 10))
        large = check_seconds(write_config(Path(tmp), args.topics))
    print(f"check of {args.topics // 10} topics: {small:.2f} s")
    print(f"check of {args.topics} topics: {large:.2f} s")
    print(f"ratio (10x the topics): {large / small:.1f} (linear ~10, quadratic ~100)")


if __name__ == "__main__":
    main()
