"""``broker plugins CONFIG`` and ``broker check`` on plugin choices and options, run as a user runs them
(issue 20: per topic, which storage engine and key generator with which options; unknown options are
located errors naming the module)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"


def broker(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "broker", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=60)


def write_config(tmp_path: Path, sow: str) -> Path:
    """A config loading both example plugins with module-level options, and the given SOW topics."""
    path = tmp_path / "broker.xml"
    path.write_text(f"""<AMPSConfig>
  <Name>plugins-cli</Name>
  <Modules>
    <Module>
      <Name>counting</Name>
      <Library>{EXAMPLES / "counting_storage.py"}</Library>
      <Options><ReportEvery>100</ReportEvery></Options>
    </Module>
    <Module>
      <Name>upper</Name>
      <Library>{EXAMPLES / "custom_keygen.py"}</Library>
      <Options><Separator>;</Separator></Options>
    </Module>
  </Modules>
  <SOW>
{sow}
  </SOW>
</AMPSConfig>
""")
    return path


TOPICS = """
    <Topic>
      <Name>quotes</Name>
      <MessageType>json</MessageType>
      <Key>/symbol</Key>
      <Durability>transient</Durability>
      <Storage>
        <Module>counting</Module>
        <Options><Label>quotes-book</Label></Options>
      </Storage>
    </Topic>
    <Topic>
      <Name>orders</Name>
      <MessageType>json</MessageType>
      <Key>/id</Key>
      <Key>/region</Key>
      <FileName>./sow/%n.sow</FileName>
      <KeyGenerator>
        <Module>upper</Module>
        <Options><Separator>:</Separator></Options>
      </KeyGenerator>
      <Storage>
        <Module>leveldb</Module>
        <Options><sync>true</sync><lru_cache_size>64MB</lru_cache_size></Options>
      </Storage>
    </Topic>
    <Topic>
      <Name>blobs</Name>
      <MessageType>json</MessageType>
      <FileName>./sow/%n.sow</FileName>
      <History><Window>7d</Window><Granularity>1m</Granularity></History>
    </Topic>
"""


def section(stdout: str, title: str) -> list[str]:
    lines = stdout.splitlines()
    start = lines.index(title)
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith(" ")), len(lines))
    return lines[start + 1:end]


def test_plugins_shows_each_topics_storage_and_key_generator_with_their_options(tmp_path: Path) -> None:
    out = broker("plugins", str(write_config(tmp_path, TOPICS)), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert section(out.stdout, "sow topics:") == [
        "  quotes",
        "    storage engine: counting (plugin counting)",
        "      Label = quotes-book",          # per use
        "      ReportEvery = 100",            # from <Modules>
        "    key generator: default (plugin keygen-default)",
        "  orders",
        "    storage engine: leveldb (plugin storage-leveldb) at ./sow/orders.sow",
        "      sync = true",
        "      compression = none (default)",
        "      write_buffer_size = 16777216 (default)",
        "      lru_cache_size = 64MB",
        "      bloom_filter_bits = 10 (default)",
        "    key generator: upper (plugin upper)",
        "      Separator = :",                # per use wins over the module's ;
        "  blobs",
        "    storage engine: leveldb (plugin storage-leveldb) at ./sow/blobs.sow",
        "      sync = false (default)",
        "      compression = none (default)",
        "      write_buffer_size = 16777216 (default)",
        "      bloom_filter_bits = 10 (default)",
        "    key generator: none (publishers send the SowKey)",
        "    history: Window 7d, Granularity 1m in leveldb at ./sow/blobs.sow.history",
    ]
    storage_engines = section(out.stdout, "storage engines:")
    assert any(line.split()[:3] == ["counting", "from", "counting"] for line in storage_engines)
    assert "options: Label, ReportEvery" in "\n".join(storage_engines)


def test_plugins_without_a_config_lists_the_builtins_only(tmp_path: Path) -> None:
    out = broker("plugins", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "sow topics:" not in out.stdout
    assert "options: sync, compression, write_buffer_size, lru_cache_size, bloom_filter_bits" in out.stdout


@pytest.mark.parametrize(("bad", "good", "message"), [
    ("<Label>quotes-book</Label><Bogus>1</Bogus>", "<Label>quotes-book</Label>",
     "/AMPSConfig/SOW/Topic[1]/Storage: storage engine 'counting' (plugin 'counting'): unknown option <Bogus> "
     "(accepted: Label, ReportEvery)"),
    ("<Separator>:</Separator><Sep>:</Sep>", "<Separator>:</Separator>",
     "/AMPSConfig/SOW/Topic[2]/KeyGenerator: key generator 'upper' (plugin 'upper'): unknown option <Sep> "
     "(accepted: Separator)"),
    ("<sync>true</sync><cache>8MB</cache>", "<sync>true</sync>",
     "/AMPSConfig/SOW/Topic[2]/Storage: storage engine 'leveldb' (plugin 'storage-leveldb'): unknown option "
     "<cache> (accepted: sync, compression"),
    ("<sync>sometimes</sync>", "<sync>true</sync>",
     "/AMPSConfig/SOW/Topic[2]/Storage: storage engine 'leveldb' (plugin 'storage-leveldb'): option <sync>: "
     "'sometimes' is not a boolean"),
], ids=["storage-plugin", "key-generator-plugin", "leveldb-unknown", "leveldb-bad-value"])
@pytest.mark.parametrize("command", ["check", "plugins"])
def test_unknown_or_bad_option_is_an_error_with_file_line_and_module(tmp_path: Path, command: str, bad: str,
                                                                      good: str, message: str) -> None:
    assert good in TOPICS
    path = write_config(tmp_path, TOPICS.replace(good, bad))
    lines = path.read_text().splitlines()
    bad_line = next(n for n, text in enumerate(lines, 1) if bad in text)
    element = message.split(":")[0].rsplit("/", 1)[-1]  # Storage or KeyGenerator: the line of its start tag
    line = max(n for n, text in enumerate(lines[:bad_line], 1) if f"<{element}>" in text)
    out = broker(command, str(path), cwd=tmp_path)
    assert out.returncode == 2, out.stdout
    assert f"error: {path}:{line}: {message}" in out.stderr
    assert out.stderr.splitlines()[-1] == "1 error(s), 0 warning(s)." and "Traceback" not in out.stderr


def test_check_is_clean_with_valid_options(tmp_path: Path) -> None:
    out = broker("check", str(write_config(tmp_path, TOPICS)), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "sow topic quotes: json, key /symbol, counting" in out.stdout
