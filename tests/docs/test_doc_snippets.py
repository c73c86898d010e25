"""Every fenced block in README.md and docs/*.md is run, checked, or marked not-run with a reason.

The convention (for whoever writes docs). By its language, a block is

* ``python``, ``py``: run with the test's Python (the venv's), as a file, in a fresh working directory;
* ``js``, ``javascript``: run under Node as a CommonJS file, with the npm ``amps`` client resolvable as
  ``require('amps')`` (tests/node's pinned copy);
* ``bash``, ``sh``, ``shell``: run with ``bash -e`` (the venv's ``bin`` first on ``PATH``);
* ``xml``, ``toml``, ``json``: parsed (an XML fragment may have several top-level elements);
* anything else, or no language: nothing by default, so it must carry a marker.

A marker is an HTML comment (invisible on the rendered page) on its own line above the block, with only
blank lines between the two:

* ``<!-- not-run: REASON -->``: not run; the reason is required (why it cannot run, or what checks it
  instead);
* ``<!-- snippet: ITEM; ITEM ... -->``: how to run it. Items:

  - ``needs-broker``: a running ``broker serve configs/quickstart.xml`` (one per test module);
  - ``prints TEXT``: what the block writes to stdout must contain TEXT (``\\n`` in TEXT: a line break);
  - ``serve``: a bash block that starts ``broker serve``: it must log ``ready`` within the timeout, and
    then stop cleanly on SIGTERM;
  - ``pytest``: a python block that is a test file: run with pytest (pytest-trio's trio mode on);
  - ``copy PATH ...``: copy these files (from the repository root) into the working directory first;
  - ``excerpt-of PATH``: not run; the parts between ``# ...`` lines must be in PATH (from the repository
    root), verbatim and in order;
  - ``timeout SECONDS``: instead of 30.

The working directory holds a copy of ``configs/`` and a link to ``docs/``, so a block may name
``configs/quickstart.xml`` as the docs do. The documented ports (9007, 9008, 8085, 9443, 9100, 9101) are
moved to free ports on 127.0.0.1, in the block's text and in that copy of ``configs/`` alike (those of the
shared broker for ``needs-broker``). A shell block that would install packages or start a server without
``serve`` is refused before it runs: mark it ``not-run`` with the reason.

Each runnable or checked block is one test, ``test_snippet[docs/file.md:LINE]``;
``test_every_block_is_run_or_marked[docs/file.md]`` fails for a block that is neither.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from lxml import etree

from broker.testing.process import BrokerProcess

from .conftest import ROOT, QuickstartBroker, free_ports, rewrite_ports, snippet_dir

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN = {"python": "python", "py": "python", "js": "js", "javascript": "js", "bash": "bash", "sh": "bash",
       "shell": "bash"}
PARSE = {"xml", "toml", "json"}
ITEMS = {"needs-broker", "prints", "serve", "excerpt-of", "timeout", "pytest", "copy"}
DEFAULT_TIMEOUT = 30.0

_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
_MARKER = re.compile(r"^\s*<!--\s*(snippet|not-run)\s*:(.*?)-->\s*$")
_ELISION = re.compile(r"^\s*# \.\.\.\s*$", re.M)
#: What a block must not do unmarked: install software, or start a server that never returns.
_HAZARDS = {
    r"\b(pip|npm|apt-get|apt)\s+install\b": "installs packages",
    r"\bbroker\s+serve\b": "starts a broker that runs until it is stopped",
    r"\bpython3?\s+-m\s+bench\b": "runs the benchmarks (minutes)",
    r"\bspark-submit\b": "submits to a Spark cluster",
}


@dataclass
class Block:
    """A fenced block of a page, with the marker above it (if any)."""

    doc: str  # the page, relative to the repository root
    line: int  # the line of the opening fence
    lang: str
    code: str
    kind: str = ""  # "snippet", "not-run" or "" (no marker)
    items: dict[str, str] = field(default_factory=dict)
    reason: str = ""

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"

    def problem(self) -> str | None:
        """Why the block is neither run nor checked nor properly marked; ``None`` when it is fine."""
        if self.kind == "not-run":
            return None if self.reason else "is marked not-run without a reason: write <!-- not-run: why -->"
        unknown = set(self.items) - ITEMS
        if unknown:
            return f"has unknown snippet items {sorted(unknown)} (known: {', '.join(sorted(ITEMS))})"
        if "excerpt-of" in self.items:
            return None if self.items["excerpt-of"] else "has excerpt-of without a file"
        if self.lang in PARSE:
            return None
        if self.lang not in RUN:
            return (f"is a ```{self.lang or ''} block, which is not run: mark it <!-- not-run: why --> or give it "
                    "a language that runs (python, js, bash)")
        for pattern, what in _HAZARDS.items() if RUN[self.lang] == "bash" else ():
            if re.search(pattern, self.code) and not ("serve" in self.items and "serve" in pattern):
                return f"{what}: mark it <!-- not-run: why -->" + (
                    " or <!-- snippet: serve -->" if "serve" in pattern else "")
        return None


def parse_marker(text: str) -> tuple[str, dict[str, str], str]:
    """``(kind, items, reason)`` of a marker comment's text."""
    match = _MARKER.match(text)
    if match is None:
        return "", {}, ""
    kind, rest = match.group(1), match.group(2).strip()
    if kind == "not-run":
        return kind, {}, rest
    items = {}
    for item in filter(None, (i.strip() for i in rest.split(";"))):
        name, _, value = item.partition(" ")
        items[name] = value.strip()
    return kind, items, ""


def blocks_of(text: str, doc: str) -> list[Block]:
    """The fenced blocks of a page's text."""
    lines = text.splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence, lang = opening.groups()
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        body = [line[len(indent):] if line.startswith(indent) else line.lstrip() for line in lines[i + 1:end]]
        above = i - 1
        while above >= 0 and not lines[above].strip():
            above -= 1
        kind, items, reason = parse_marker(lines[above]) if above >= 0 else ("", {}, "")
        found.append(Block(doc, i + 1, lang.lower(), "\n".join(body) + "\n", kind, items, reason))
        i = end + 1
    return found


def all_blocks() -> list[Block]:
    return [b for path in DOCS for b in blocks_of(path.read_text(), str(path.relative_to(ROOT)))]


def checked_blocks() -> list[Block]:
    return [b for b in all_blocks() if b.kind != "not-run" and b.problem() is None]


# -- what a block is made to do ----------------------------------------------------------------------------

def check_excerpt(block: Block, root: Path = ROOT) -> None:
    """The parts between ``# ...`` lines are in the named file, verbatim and in order."""
    path = root / block.items["excerpt-of"]
    assert path.is_file(), f"{block.where}: excerpt-of names {path}, which does not exist"
    text = path.read_text()
    at = 0
    for part in (p.strip("\n") for p in _ELISION.split(block.code) if p.strip()):
        found = text.find(part, at)
        assert found >= 0, (f"{block.where}: this part is not in {block.items['excerpt-of']} (after what came "
                            f"before it): update the page or the file\n{part}")
        at = found + len(part)


def check_parses(block: Block) -> None:
    if block.lang == "xml":
        try:
            etree.fromstring(f"<fragment>{block.code}</fragment>".encode())
        except etree.XMLSyntaxError as exc:
            pytest.fail(f"{block.where}: the XML is not well-formed: {exc}")
    elif block.lang == "toml":
        try:
            tomllib.loads(block.code)
        except tomllib.TOMLDecodeError as exc:
            pytest.fail(f"{block.where}: the TOML does not parse: {exc}")
    elif block.lang == "json":
        try:
            json.loads(block.code)
        except ValueError as exc:
            pytest.fail(f"{block.where}: the JSON does not parse: {exc}")


def environment() -> dict[str, str]:
    """The venv's ``bin`` first on ``PATH`` (``broker``, ``python``), unbuffered output; a SparkSession's JVM
    runs the first JIT tier only (a JVM option, as the Spark tests' session's: no Spark setting changes)."""
    venv_bin = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": venv_bin + os.pathsep + os.environ.get("PATH", ""), "PYTHONUNBUFFERED": "1",
            "PYSPARK_SUBMIT_ARGS": "--driver-java-options -XX:TieredStopAtLevel=1 pyspark-shell"}


def command(block: Block, home: Path, amps_js: Path | None) -> list[str]:
    """Write the block into ``home`` and return the command that runs it."""
    kind = RUN[block.lang]
    for name in block.items.get("copy", "").split():
        shutil.copy(ROOT / name, home)
    if kind == "python" and "pytest" in block.items:
        (home / "test_snippet.py").write_text(block.code)
        return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "trio_mode=true",
                "test_snippet.py"]
    if kind == "python":
        (home / "snippet.py").write_text(block.code)
        return [sys.executable, "snippet.py"]
    if kind == "js":
        assert amps_js is not None
        (home / "node_modules").symlink_to(amps_js / "node_modules", target_is_directory=True)
        (home / "snippet.js").write_text(block.code)
        return ["node", "snippet.js"]
    (home / "snippet.sh").write_text(block.code)
    return ["bash", "-e", "snippet.sh"]


def run_block(block: Block, home: Path, amps_js: Path | None = None) -> str:
    """Run a block to its end; returns its stdout. Fails on a non-zero exit, a timeout or a missing ``prints``."""
    timeout = float(block.items.get("timeout") or DEFAULT_TIMEOUT)
    argv = command(block, home, amps_js)
    try:
        done = subprocess.run(argv, cwd=home, env=environment(), capture_output=True, text=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{block.where} did not finish within {timeout:.0f}s (a server? mark it <!-- snippet: serve "
                    f"--> or <!-- not-run: why -->; slow? <!-- snippet: timeout N -->); output:\n{exc.stdout!r}")
    assert done.returncode == 0, (f"{block.where} exited with {done.returncode}:\n--- stdout ---\n"
                                  f"{done.stdout[-3000:]}\n--- stderr ---\n{done.stderr[-3000:]}")
    expected = block.items.get("prints", "").replace("\\n", "\n")
    if expected:
        assert expected in done.stdout, f"{block.where} should print {expected!r}; it printed:\n{done.stdout[-3000:]}"
    return done.stdout


def group_gone(pgid: int, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds until no process of the group is left; whether none is."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def serve_block(block: Block, home: Path) -> str:
    """Start a block that serves, wait for the broker's ``ready`` line, SIGTERM it; returns its output."""
    timeout = float(block.items.get("timeout") or DEFAULT_TIMEOUT)
    out = home / "serve.log"
    with open(out, "wb") as log:
        proc = subprocess.Popen(command(block, home, None), cwd=home, env=environment(), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while " ready (" not in out.read_text(errors="replace"):
            assert proc.poll() is None, (f"{block.where} exited with {proc.returncode} before the broker was "
                                         f"ready:\n{out.read_text(errors='replace')[-3000:]}")
            assert time.monotonic() < deadline, (f"{block.where}: no broker ready within {timeout:.0f}s:\n"
                                                 f"{out.read_text(errors='replace')[-3000:]}")
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(15)
        group_gone(proc.pid, 15)  # the shell may end first: wait for the broker it started
    finally:
        if not group_gone(proc.pid, 0):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.wait()
    text = out.read_text(errors="replace")
    assert "broker stopped" in text, f"{block.where}: the broker did not stop cleanly on SIGTERM:\n{text[-3000:]}"
    return text


# -- the tests -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("doc", [str(p.relative_to(ROOT)) for p in DOCS])
def test_every_block_is_run_or_marked(doc: str) -> None:
    problems = [f"{b.where} {b.problem()}" for b in blocks_of((ROOT / doc).read_text(), doc) if b.problem()]
    assert not problems, "\n".join([*problems, "(the markers: the docstring of tests/docs/test_doc_snippets.py)"])


def _marks(block: Block) -> tuple[pytest.MarkDecorator, ...]:
    """A block that starts Spark joins the Spark lane (``-m 'not spark'`` leaves it out); a block with its own
    ``timeout`` gets pytest-timeout's limit raised to match (the suite's 120 s would cut it short)."""
    marks = [pytest.mark.spark] if re.search(r"\bpyspark\b|\bbroker\.spark\b", block.code) else []
    if "timeout" in block.items:
        marks.append(pytest.mark.timeout(float(block.items["timeout"]) + 60))
    return tuple(marks)


@pytest.mark.parametrize("block", [pytest.param(b, id=b.where, marks=_marks(b)) for b in checked_blocks()])
def test_snippet(block: Block, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    if "excerpt-of" in block.items:
        check_excerpt(block)
        return
    if block.lang in PARSE:
        check_parses(block)
        return
    broker: QuickstartBroker | None = (request.getfixturevalue("quickstart_broker")
                                       if "needs-broker" in block.items else None)
    ports = broker.ports if broker is not None else free_ports()
    home = snippet_dir(tmp_path / "home", ports)
    block = dataclasses.replace(block, code=rewrite_ports(block.code, ports))
    if "serve" in block.items:
        serve_block(block, home)
        return
    amps_js = request.getfixturevalue("amps_js") if RUN[block.lang] == "js" else None
    run_block(block, home, amps_js)
    if broker is not None:
        assert broker.proc.proc is not None and broker.proc.proc.poll() is None, (
            f"the quickstart broker died while {block.where} ran:\n{broker.proc.log()[-3000:]}")


def test_the_pages_have_runnable_snippets() -> None:
    """The harness finds what it is meant to: blocks of each kind, and the pages it must cover."""
    runs = {RUN[b.lang] for b in checked_blocks() if b.lang in RUN and "excerpt-of" not in b.items}
    assert runs == {"python", "js", "bash"}, runs
    assert any("needs-broker" in b.items for b in checked_blocks())
    assert {"README.md", "docs/websocket.md", "docs/plugins.md", "docs/config.md"} <= {
        str(p.relative_to(ROOT)) for p in DOCS}


# -- the harness itself can fail -----------------------------------------------------------------------------

PAGE = """\
# A page

```
broker serve x.xml
```

<!-- not-run: -->
```python
print(1)
```

<!-- snippet: needs-brokr -->
```bash
echo hi
```

```bash
pip install something
```

<!-- snippet: serve -->
```bash
broker serve configs/quickstart.xml
```

<!-- not-run: a sketch with placeholders -->

```text
anything
```

- in a list:

  ```python
  print("indented")
  ```
"""


def test_unmarked_and_badly_marked_blocks_are_reported() -> None:
    blocks = blocks_of(PAGE, "page.md")
    assert [(b.line, b.lang) for b in blocks] == [(3, ""), (8, "python"), (13, "bash"), (17, "bash"),
                                                   (22, "bash"), (28, "text"), (34, "python")]
    problems = [b.problem() for b in blocks]
    assert "is a ``` block, which is not run" in problems[0]
    assert "without a reason" in problems[1]
    assert "unknown snippet items ['needs-brokr']" in problems[2]
    assert "installs packages" in problems[3]
    assert problems[4] is None and blocks[4].items == {"serve": ""}
    assert problems[5] is None and blocks[5].reason == "a sketch with placeholders"
    assert problems[6] is None and blocks[6].code == 'print("indented")\n'


def test_a_failing_or_wrong_snippet_fails(tmp_path: Path) -> None:
    fails = Block("page.md", 1, "python", "import sys\nsys.exit(3)\n")
    with pytest.raises(AssertionError, match="exited with 3"):
        run_block(fails, snippet_dir(tmp_path / "a", free_ports()))
    wrong = Block("page.md", 2, "bash", "echo 41\n", "snippet", {"prints": "42"})
    with pytest.raises(AssertionError, match="should print '42'"):
        run_block(wrong, snippet_dir(tmp_path / "b", free_ports()))
    set_e = Block("page.md", 3, "bash", "false\necho after\n")
    with pytest.raises(AssertionError, match="exited with 1"):
        run_block(set_e, snippet_dir(tmp_path / "c", free_ports()))


def test_a_drifted_excerpt_fails(tmp_path: Path) -> None:
    (tmp_path / "x.py").write_text("a = 1\n\nb = 2\n")
    good = Block("page.md", 1, "python", "b = 2\n", "snippet", {"excerpt-of": "x.py"})
    check_excerpt(good, tmp_path)
    for code in ("b = 3\n", "b = 2\n# ...\na = 1\n"):
        with pytest.raises(AssertionError, match="this part is not in x.py"):
            check_excerpt(Block("page.md", 1, "python", code, "snippet", {"excerpt-of": "x.py"}), tmp_path)


def test_ports_move_in_the_snippet_and_in_the_configs(tmp_path: Path) -> None:
    ports = free_ports()
    home = snippet_dir(tmp_path, ports)
    assert rewrite_ports("tcp://127.0.0.1:9007/amps/json 19007", ports) == (
        f"tcp://127.0.0.1:{ports[9007]}/amps/json 19007")
    quickstart = (home / "configs" / "quickstart.xml").read_text()
    for port in (9007, 9008, 8085):
        assert f"<InetAddr>127.0.0.1:{ports[port]}</InetAddr>" in quickstart
    assert re.search(r"<InetAddr>(\d+|0\.0\.0\.0:\d+)</InetAddr>", quickstart) is None


# -- docs/plugins.md's security modules, loaded as the page says ----------------------------------------------

SECURITY_CONFIG = """<AMPSConfig>
  <Name>docs-security-example</Name>
  <Modules>
    <!-- relative to this file's directory (conf/), not to the working directory the broker runs in -->
    <Module><Name>examples</Name><Library>../docs/examples/security_modules.py</Library></Module>
  </Modules>
  <Authentication><Module>static-token</Module><Options><Token>s3cret</Token></Options></Authentication>
  <Entitlement><Module>read-only</Module></Entitlement>
  <Transports>
    <Transport><Name>amps-tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:{port}</InetAddr>
      <Protocol>amps</Protocol></Transport>
  </Transports>
  <SOW><Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
    <Durability>transient</Durability></Topic></SOW>
</AMPSConfig>
"""


def test_the_security_modules_example_through_modules(tmp_path: Path) -> None:
    """docs/examples/security_modules.py, loaded by a relative ``<Library>`` (docs/plugins.md): the token
    logs on, another password is refused, and the read-only entitlements refuse a publish but allow a query."""
    import AMPS as amps
    home = snippet_dir(tmp_path / "home", free_ports())
    (home / "conf").mkdir()
    port = free_ports()[9007]
    config = home / "conf" / "broker.xml"
    config.write_text(SECURITY_CONFIG.format(port=port))
    with BrokerProcess(config, port, cwd=home) as proc:
        refused = amps.Client(f"wrong-{time.monotonic_ns()}")
        with pytest.raises(amps.AuthenticationException):
            refused.connect(f"tcp://alice:guess@127.0.0.1:{port}/amps/json")
            refused.logon(5000)
        client = amps.Client(f"alice-{time.monotonic_ns()}")
        client.connect(f"tcp://alice:s3cret@127.0.0.1:{port}/amps/json")
        client.logon(5000)
        try:
            with pytest.raises(amps.AMPSException):
                client.execute(amps.Command("publish").set_topic("orders").set_data('{"id": 1}')
                               .add_ack_type("processed"))
            rows = [m for m in client.sow("orders") if m.get_command() == "sow"]
            assert rows == []
        finally:
            client.close()
        assert "refused write" in proc.log(), proc.log()[-3000:]


def test_a_serve_block_starts_and_stops_the_broker(tmp_path: Path) -> None:
    """``serve``: the broker comes up on the moved ports and stops cleanly; one that cannot start fails."""
    ports = free_ports()
    block = Block("page.md", 1, "bash", rewrite_ports("broker serve configs/quickstart.xml\n", ports), "snippet",
                  {"serve": ""})
    out = serve_block(block, snippet_dir(tmp_path / "a", ports))
    assert f"listening on 127.0.0.1:{ports[9007]}" in out
    broken = Block("page.md", 2, "bash", "broker serve configs/missing.xml\n", "snippet", {"serve": ""})
    with pytest.raises(AssertionError, match="before the broker was ready"):
        serve_block(broken, snippet_dir(tmp_path / "b", ports))
