"""broker/server is layered, and no broker module takes part in an import cycle (type-only imports included).

The layers of ``broker/server``, lowest first (also in :mod:`broker.server.services`' docstring). A module may
import modules of its own layer or lower ones, never a higher one: a service does not know the sessions, a
session does not know the kernel.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "broker"

SERVER_LAYERS: list[set[str]] = [
    # 1. parts: no service, no connection
    {"counters", "client_names", "outbound", "sockio", "recovery", "replay_frames", "pauses", "gctuning",
     "gilswitch", "refusal_log"},
    # 2. services, each one object with its interface
    {"durability", "client_registry", "replay_registry", "maintenance", "security_reload", "statistics_assembly"},
    # 3. what a connection is handed
    {"services"},
    # 4. connections
    {"querystream", "publish_batch", "replay", "websocket", "session_queries", "session"},
    # 5. listeners
    {"transport"},
    # 6. the kernel: builds and runs everything
    {"kernel"},
]


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str) -> Iterator[tuple[str, int]]:
    """Every broker module ``module`` imports, anywhere in it (top level, functions, ``if TYPE_CHECKING``), with
    the line. An import of a module's own ancestor package is left out: Python imports it first anyway."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in MODULES else node.module
                     for alias in node.names]
        for name in names:
            if not name.startswith("broker"):
                continue
            target = _resolve(name)
            if target is None or target == module or module.startswith(target + "."):
                continue
            yield target, node.lineno


def _layer(module: str) -> int | None:
    short = module.removeprefix("broker.server.")
    return next((i for i, layer in enumerate(SERVER_LAYERS) if short in layer), None)


def test_every_server_module_has_a_layer() -> None:
    server = {m.removeprefix("broker.server.") for m in MODULES if m.startswith("broker.server.")}
    placed = set().union(*SERVER_LAYERS)
    assert server - placed == set(), "give each new broker/server module a layer in SERVER_LAYERS"
    assert placed - server == set(), "a module in SERVER_LAYERS no longer exists"


def test_no_server_import_runs_up_the_layers() -> None:
    upward = []
    for module in MODULES:
        own = _layer(module) if module.startswith("broker.server.") else None
        if own is None:
            continue
        for target, line in imports_of(module):
            theirs = _layer(target) if target.startswith("broker.server.") else None
            if theirs is not None and theirs > own:
                upward.append(f"{MODULES[module].relative_to(ROOT)}:{line} imports {target} (layer {theirs + 1} "
                              f"above {own + 1})")
    assert upward == []


def test_nothing_below_the_kernel_imports_broker_server() -> None:
    # The server imports the other packages, never the reverse: only the command line runs a broker (the Admin
    # server, the actions' host and the statistics are handed what they use by the kernel).
    allowed = ("broker.server", "broker.cli")
    reaching = [f"{MODULES[m].relative_to(ROOT)}:{line} imports {t}" for m in MODULES if not m.startswith(allowed)
                for t, line in imports_of(m) if t.startswith("broker.server")]
    assert reaching == []


def _cycles() -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    graph = {m: {t for t, _ in imports_of(m)} for m in MODULES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycle_among_broker_modules() -> None:
    assert _cycles() == []


def test_the_walk_sees_type_only_and_function_local_imports() -> None:
    # The 8-module cycle this test guards against ran through `if TYPE_CHECKING:` imports.
    assert "broker.engine.engine" in {t for t, _ in imports_of("broker.actions.host")}  # under TYPE_CHECKING
    assert "broker.admin.server" in {t for t, _ in imports_of("broker.server.kernel")}  # inside a method
