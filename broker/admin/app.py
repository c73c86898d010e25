"""The Admin HTTP application: a plain ASGI callable (no framework) over a statistics source.

Routes:

* ``GET /metrics``: Prometheus text format 0.0.4, or OpenMetrics when the ``Accept`` header asks for
  ``application/openmetrics-text``; gzip when accepted; ``?name[]=...`` restricts the families.
* ``GET /amps.json``, ``/amps/<path>.json``: the AMPS statistics tree or the sub-tree at ``<path>``
  (see :mod:`broker.admin.amps_tree`); ``/amps`` and ``/amps/<path>`` without ``.json`` render the
  same node as browsable HTML, as AMPS's basic monitoring interface does.
* ``GET|POST /amps/administrator/<action>``: runs ``admin_actions[<action>]`` (e.g.
  ``actions/archive-journals``) and returns its text; ``/amps/administrator`` lists them. An
  :class:`AdminEndpoint` (what an ``amps-action-on-admin`` action registers) also receives the query
  parameters and chooses the status (400 for a missing or unparsable parameter, 409 when busy, 500 on failure).
* ``GET /amps/administrator/actions``: JSON index of the actions: ``rest`` lists each REST-triggered one (its
  path, name, description, required parameters, and the optional ones with their default), ``actions`` every
  configured action (triggers with their options, gates and steps, variables used); see :func:`actions_index`.
* ``GET /``: the web console (``/console/<file>``: its static files from ``broker/admin/static``, the AMPS
  JavaScript client under ``/console/vendor/``, ``/console/state.json`` and ``/console/history.json`` with an
  ``X-Statistics-Age`` header, see :mod:`broker.admin.console`).
  Anything else is 404; a known path with a wrong method is 405.

Every route is a :class:`Route` of :data:`ROUTES` naming the Admin right it needs (:meth:`AdminApp.requirement`
answers it per path: ``statistics`` for the statistics, the console and the action listings; below
``/amps/administrator/`` ``reset`` for the authorization resets, ``shutdown`` for an action with an
``amps-action-do-shutdown`` step, else the action's own path). :class:`~broker.admin.auth.BasicAuth` checks it
against the identity's :class:`~broker.security.AdminRights` before the request reaches the application, and
puts those rights in the scope (:data:`RIGHTS_SCOPE_KEY`) so that ``/console/state.json`` tells the console what
to show.

Everything served under ``/metrics`` and ``/amps`` is a view over the :class:`StatisticsSampler`'s latest
sample, rendered once per sample and path (and once more gzip-compressed, for clients that accept gzip)
and then served as cached bytes, so a request costs the same with 10 or 10,000 clients. The ``/amps``
tree is built on the event loop in slices of a hundred clients (a worker thread running Python would
take the GIL from the loop in 5 ms turns); the Prometheus exposition, whose size does not grow with the
number of clients, is encoded in a worker thread, and gzip runs in one (zlib releases the GIL). Request paths and
query strings are bounded (:data:`MAX_PATH_BYTES`, :data:`MAX_PATH_SEGMENTS`, :data:`MAX_QUERY_BYTES`).

The application never raises to the server: a failing statistics source or action is logged and
answered with a 500 carrying the error's message.
"""

from __future__ import annotations

import gzip
import logging
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

import orjson
import trio
from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.registry import CollectorRegistry, RestrictedRegistry

from broker.admin.amps_tree import AmpsTreeBuilder, select
from broker.admin.console import ConsoleView, history_points
from broker.admin.html_view import render_node
from broker.admin.sampler import SnapshotSource, StatisticsSampler
from broker.admin.static_files import console_file
from broker.errors import BrokerError, ParameterError
from broker.security import ALL_ADMIN_RIGHTS, AdminRights
from broker.stats.collector import make_registry
from broker.stats.snapshot import BrokerSnapshot

if TYPE_CHECKING:
    from broker.actions.runtime import ActionDescription

__all__ = ["SAMPLE_HEADER", "MAX_PATH_BYTES", "MAX_PATH_SEGMENTS", "MAX_QUERY_BYTES", "RIGHTS_SCOPE_KEY", "ROUTES", "USER_SCOPE_KEY",
           "AdminAction", "AdminApp", "AdminEndpoint", "Requirement", "Route", "actions_index", "allows"]

log = logging.getLogger("broker.admin")


@dataclass(frozen=True)
class AdminEndpoint:
    """An administrator action that reads the query parameters and chooses its HTTP status.

    Attributes:
        handler: ``await handler(parameters) -> (status, text)``; parameters are the query string's (the last
            value of a repeated name wins; names keep their case).
        name: Shown in the ``/amps/administrator`` listing.
        description: Shown in the listing.
        required: Parameter names shown in the listing (the handler checks them).
    """

    handler: Callable[[Mapping[str, str]], Awaitable[tuple[int, str]]]
    name: str = ""
    description: str = ""
    required: tuple[str, ...] = ()

    def listing(self) -> str:
        """What the listing shows after the path: ``Name: Description (required parameters: A, B)``."""
        text = ": ".join(part for part in (self.name, self.description) if part)
        if self.required:
            text += f" (required parameters: {', '.join(self.required)})"
        return text.strip()


#: An administrator action: a plain coroutine function returning a short human-readable result (answered
#: 200), or an :class:`AdminEndpoint`.
AdminAction = Callable[[], Awaitable[str]] | AdminEndpoint

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

#: Longest request path served (bytes, after percent-decoding); longer is 414.
MAX_PATH_BYTES = 2048
#: Most ``/``-separated path segments served; more is 400.
MAX_PATH_SEGMENTS = 32
#: Longest query string served (bytes); longer is 414.
MAX_QUERY_BYTES = 2048
#: Statistics responses (``/metrics``, ``/amps``) sent at the same time; more requests wait their turn.
MAX_CONCURRENT_RESPONSES = 2
#: Renderings kept per sample (by path and format); more distinct paths are rendered but not kept.
MAX_CACHED_RENDERINGS = 64

#: The response header naming the sample a ``/metrics`` or ``/amps`` response shows (grows by one per
#: sample), so a client that needs values newer than some event waits for a larger number.
SAMPLE_HEADER = b"x-statistics-sample"

_ADMIN_PREFIX = "/amps/administrator"
#: ``/amps/administrator/actions``: the JSON index of the actions (REST ones are served below it).
_INDEX = "actions"
_CONSOLE = "/console"
_TEXT = "text/plain; charset=utf-8"
#: The step module that makes an action a shutdown one (it needs the ``shutdown`` right).
_SHUTDOWN_STEP = "do amps-action-do-shutdown"

#: The ASGI scope key under which the authentication wrapper leaves the requester's
#: :class:`~broker.security.AdminRights` (absent: every right, as on an Admin port without authentication).
RIGHTS_SCOPE_KEY = "broker.admin_rights"
#: The scope key of the authenticated user's name (absent without authentication).
USER_SCOPE_KEY = "broker.admin_user"

#: What a path needs: ``(right, detail)`` with right ``statistics``, ``reset`` (detail: the module kind),
#: ``shutdown`` (detail: the action path) or ``action`` (detail: the path below ``/amps/administrator/actions/``).
Requirement = tuple[str, str]


@dataclass(frozen=True)
class Route:
    """One route of the Admin application.

    Attributes:
        name: Its handler's name, for listings and errors.
        matches: Whether a request path is this route's.
        methods: The methods it answers (others: 405).
        right: The Admin right it needs: ``statistics``, or ``administrator`` (decided per path by
            :meth:`AdminApp.requirement`: ``reset``, ``shutdown`` or the action's own path).
        examples: Concrete paths of it (tests walk them with every identity); the administrator route adds one
            per configured action (:meth:`AdminApp.paths`).
    """

    name: str
    matches: Callable[[str], bool]
    methods: tuple[str, ...]
    right: str
    examples: tuple[str, ...]


#: Every route, in the order requests are matched against them.
ROUTES: tuple[Route, ...] = (
    Route("metrics", lambda p: p == "/metrics", ("GET", "HEAD"), "statistics", ("/metrics",)),
    Route("administrator", lambda p: p == _ADMIN_PREFIX or p.startswith(_ADMIN_PREFIX + "/"), ("GET", "POST"),
          "administrator", (_ADMIN_PREFIX, f"{_ADMIN_PREFIX}/{_INDEX}")),
    Route("amps", lambda p: p in ("/amps", "/amps.json") or p.startswith("/amps/"), ("GET", "HEAD"), "statistics",
          ("/amps", "/amps.json", "/amps/instance.json", "/amps/instance")),
    Route("console", lambda p: p in ("/", _CONSOLE) or p.startswith(_CONSOLE + "/"), ("GET", "HEAD"), "statistics",
          ("/", _CONSOLE, f"{_CONSOLE}/index.html", f"{_CONSOLE}/console.js", f"{_CONSOLE}/console.css",
           f"{_CONSOLE}/vendor/amps.js", f"{_CONSOLE}/state.json", f"{_CONSOLE}/history.json")),
)


def allows(rights: AdminRights, need: Requirement) -> bool:
    """Whether ``rights`` cover what a path needs."""
    right, detail = need
    if right == "statistics":
        return rights.statistics
    if right == "reset":
        return rights.reset
    if right == "shutdown":
        return rights.shutdown
    return rights.may_run(detail)


class AdminApp:
    """The Admin server's ASGI application.

    Args:
        source: Returns the broker's statistics (``StatisticsAssembly.sample``); ignored when ``sampler``
            is given.
        admin_actions: Administrator actions by path below ``/amps/administrator/``. The dict is used
            by reference, so entries added later are served.
        interval: AMPS ``Admin/Interval`` in seconds: how often statistics are sampled, and the
            averaging window of ``*_per_sec`` values.
        clock: Returns the current epoch time (uptime and rates).
        runtime_metrics: Include process/Python runtime metrics on ``/metrics``.
        sampler: The sampler to serve from (its owner runs it); by default one over ``source``, which
            the Admin server runs.
        console: The web console's view (which websocket transports its query panel may use).
        actions_catalog: Returns every configured action (``ActionRuntime.describe``), for the
            ``/amps/administrator/actions`` index; without it the index lists the REST actions only.
    """

    def __init__(
        self,
        source: SnapshotSource,
        *,
        admin_actions: dict[str, AdminAction] | None = None,
        interval: float = 10.0,
        clock: Callable[[], float] = time.time,
        runtime_metrics: bool = True,
        sampler: StatisticsSampler | None = None,
        console: ConsoleView | None = None,
        actions_catalog: Callable[[], Sequence[ActionDescription]] | None = None,
    ) -> None:
        self.actions_catalog = actions_catalog
        self.console = console if console is not None else ConsoleView()
        self.sampler = sampler if sampler is not None else StatisticsSampler(source, interval=interval)
        self.admin_actions: dict[str, AdminAction] = admin_actions if admin_actions is not None else {}
        self._rendering: BrokerSnapshot | None = None
        self.registry = make_registry(self._rendered_snapshot, clock=clock, runtime_metrics=runtime_metrics)
        self._tree = AmpsTreeBuilder(interval=interval, clock=clock)
        # One rendering at a time, in a worker thread; results kept for the sample they were made from.
        self._render_lock = trio.Lock()
        # Its own thread token: never waits behind (or starves) the broker's other worker-thread users.
        self._render_limiter = trio.CapacityLimiter(1)
        # Few statistics bodies in flight: each send step of each response is event-loop time, so many
        # concurrent large responses would lengthen every loop turn that messages wait for.
        self._senders = trio.Semaphore(MAX_CONCURRENT_RESPONSES)
        self._cache: dict[Hashable, Any] = {}
        self._cache_generation = -1

    def route(self, path: str) -> Route | None:
        """The route serving ``path`` (``None``: none, answered 404)."""
        return next((r for r in ROUTES if r.matches(path)), None)

    def requirement(self, path: str) -> Requirement | None:
        """The Admin right ``path`` needs (``None``: no route serves it; the answer is 404 to anyone)."""
        route = self.route(path)
        if route is None:
            return None
        if route.right != "administrator":
            return (route.right, "")
        name = path[len(_ADMIN_PREFIX):].strip("/")
        if name in ("", _INDEX):
            return ("statistics", "")  # the listings describe the configuration, as /amps does
        kind, _, rest = name.partition("/")
        if kind == "authorization" and rest.endswith("/reset"):
            return ("reset", rest.removesuffix("/reset"))
        if kind == _INDEX:
            return ("shutdown", rest) if rest in self._shutdown_paths() else ("action", rest)
        return ("action", name)

    def paths(self) -> list[str]:
        """A concrete path of every route and one per configured administrator action (tests walk them)."""
        found = [p for r in ROUTES for p in r.examples]
        found += [f"{_ADMIN_PREFIX}/{name}" for name in sorted(self.admin_actions)]
        return found

    def _shutdown_paths(self) -> set[str]:
        """The REST paths (below ``actions/``) of the actions that shut the broker down."""
        if self.actions_catalog is None:
            return set()
        try:
            catalog = list(self.actions_catalog())
        except Exception:
            log.exception("listing the actions failed")
            return set()
        return {t["Path"].strip() for a in catalog if any(s.lower() == _SHUTDOWN_STEP for s in a.steps)
                for t in a.triggers if t.get("Path")}

    def rights_view(self, rights: AdminRights, user: str | None) -> dict[str, Any]:
        """What ``/console/state.json`` says the requester may do: its rights by name, and each action it may
        run (path, name, required parameters; shutdown ones only with the ``shutdown`` right)."""
        shutdown = self._shutdown_paths()
        run: list[dict[str, Any]] = []
        for key, action in sorted(self.admin_actions.items()):
            need = self.requirement(f"{_ADMIN_PREFIX}/{key}")
            if need is None or need[0] not in ("action", "shutdown") or not allows(rights, need):
                continue
            endpoint = action if isinstance(action, AdminEndpoint) else None
            path = key.partition("/")[2] if key.startswith(_INDEX + "/") else key
            run.append({"path": f"{_ADMIN_PREFIX}/{key}", "name": (endpoint.name if endpoint else "") or path,
                        "required": list(endpoint.required) if endpoint else [], "shutdown": path in shutdown})
        return {"user": user, "rights": rights.names(), "run": run}

    def _rendered_snapshot(self) -> BrokerSnapshot:
        assert self._rendering is not None, "the collector runs only inside _render"
        return self._rendering

    async def _render(
        self, key: Hashable, produce: Callable[[BrokerSnapshot], Awaitable[Any]]
    ) -> tuple[tuple[bytes, bytes], Any]:
        """``await produce(snapshot)`` for the latest sample, once per sample and key; later requests for the
        same key and sample get the cached value (a response body: bytes served as they are).

        Returns:
            The ``X-Statistics-Sample`` header of that sample, and what ``produce`` returned.

        Raises:
            Exception: The latest sample failed, or ``produce`` did.
        """
        generation, snapshot = await self.sampler.current()
        async with self._render_lock:
            if generation != self._cache_generation:
                self._cache.clear()
                self._cache_generation = generation
            header = (SAMPLE_HEADER, str(generation).encode())
            if key in self._cache:
                return header, self._cache[key]
            value = await produce(snapshot)
            if len(self._cache) < MAX_CACHED_RENDERINGS:
                self._cache[key] = value
            return header, value

    async def _body(
        self, key: Hashable, produce: Callable[[BrokerSnapshot], Awaitable[bytes | None]], gzipped: bool
    ) -> tuple[tuple[bytes, bytes], bytes | None]:
        """The body for ``key`` (cached per sample), gzip-compressed (also cached) when ``gzipped``."""
        sample, body = await self._render(key, produce)
        if not gzipped or body is None:
            return sample, body

        async def compress(_: BrokerSnapshot) -> bytes:
            # zlib releases the GIL while it compresses: the event loop runs on meanwhile.
            return await trio.to_thread.run_sync(gzip.compress, body, 5, limiter=self._render_limiter)

        return await self._render((key, "gzip"), compress)

    async def _encode_metrics(self, encoder: Callable[[Any], bytes], registry: Any, snapshot: BrokerSnapshot) -> bytes:
        """The Prometheus exposition of ``snapshot`` (a fixed, small number of families: rendered in a worker
        thread, whose cost does not grow with the number of clients)."""
        self._rendering = snapshot
        try:
            return await trio.to_thread.run_sync(encoder, registry, limiter=self._render_limiter)
        finally:
            self._rendering = None

    async def _tree_for(self, snapshot: BrokerSnapshot) -> dict[str, Any]:
        """The ``/amps`` tree of the sample being rendered, built once per sample on the event loop in slices
        of :data:`~broker.admin.amps_tree.CLIENT_SLICE` clients (runs under the render lock, which is what
        makes touching the cache safe here). Built on the loop rather than in a worker thread: a thread
        running Python for tens of milliseconds takes the GIL from the loop in 5 ms turns, and every
        message waits behind them."""
        tree = self._cache.get("tree")
        if tree is None:
            tree = self._cache["tree"] = await self._tree.build_sliced(snapshot)
        return tree

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry point (``http`` and ``lifespan`` scopes)."""
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return  # websockets are not served; hypercorn closes the connection
        method: str = scope["method"]
        path: str = scope["path"]
        refusal = _refuse_request(path, scope.get("query_string", b""))
        if refusal is not None:
            await _respond(send, refusal[0], refusal[1].encode(), _TEXT)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        route = self.route(path)
        if route is None:
            await _respond(send, 404, f"Not found: {path}. Try /metrics or /amps.json.\n".encode(), _TEXT)
            return
        if method not in route.methods:
            await _method_not_allowed(send, ", ".join(route.methods))
            return
        query = scope.get("query_string", b"")
        if route.name == "metrics":
            await self._metrics(send, method, headers, query)
        elif route.name == "administrator":
            await self._administrator(send, path[len(_ADMIN_PREFIX) :].strip("/"), query)
        elif route.name == "amps":
            await self._amps(send, method, path, headers)
        else:
            await self._console(send, method, path, scope.get(RIGHTS_SCOPE_KEY, ALL_ADMIN_RIGHTS),
                                scope.get(USER_SCOPE_KEY))

    async def _console_state(self, snapshot: BrokerSnapshot) -> bytes:
        """``state.json`` of a sample (small: a few series per topic, never per client): on the loop."""
        s = self.sampler
        return orjson.dumps(self.console.build(snapshot, s.taken_at or 0.0, previous=s.previous,
                                               interval_setting=s.interval, sample_duration=s.duration,
                                               late_samples=s.late))

    async def _console_history(self, _: BrokerSnapshot) -> bytes:
        """``history.json``: the chart's last ten minutes (at most 601 points of three numbers): on the loop."""
        return orjson.dumps(history_points(self.sampler.history, self.sampler.interval))

    async def _console(self, send: Send, method: str, path: str, rights: AdminRights, user: str | None) -> None:
        """The web console: its static files, the AMPS JavaScript client, and ``state.json`` (with what the
        requester may do under ``access``: :meth:`rights_view`)."""
        name = "index.html" if path in ("/", _CONSOLE, _CONSOLE + "/") else path[len(_CONSOLE) + 1:]
        if name in ("state.json", "history.json"):
            try:
                sample, state = await self._render(
                    name, self._console_state if name == "state.json" else self._console_history)
            except Exception as exc:
                log.exception("building the console state failed")
                await _respond(send, 500, f"Reading statistics failed: {exc}\n".encode(), _TEXT)
                return
            # Per response, not cached: the page says "sample late" when this exceeds twice the interval.
            age = (b"x-statistics-age", f"{self.sampler.age() or 0.0:.3f}".encode())
            if name == "state.json":  # the cached sample's object, with this requester's rights added
                state = state[:-1] + b',"access":' + orjson.dumps(self.rights_view(rights, user)) + b"}"
            await _respond(send, 200, state, "application/json", [sample, age], head=method == "HEAD")
            return
        found = console_file(name)
        if found is None:
            await _respond(send, 404, f"Not found: {path}. The console is at /.\n".encode(), _TEXT)
            return
        body, content_type = found
        await _respond(send, 200, body, content_type, head=method == "HEAD")

    async def _metrics(self, send: Send, method: str, headers: dict[str, str], query: bytes) -> None:
        encoder, content_type = choose_encoder(headers.get("accept", ""))
        names = parse_qs(query.decode("latin-1")).get("name[]")
        registry: CollectorRegistry | RestrictedRegistry = (
            self.registry.restricted_registry(names) if names else self.registry)
        gzipped = gzip_accepted(headers.get("accept-encoding", ""))
        try:
            sample, body = await self._body(
                ("metrics", content_type, tuple(names or ())),
                lambda snap: self._encode_metrics(encoder, registry, snap),
                gzipped,
            )
        except Exception as exc:  # a broken source must not take the endpoint down for good
            log.exception("collecting metrics failed")
            await _respond(send, 500, f"Collecting metrics failed: {exc}\n".encode(), _TEXT)
            return
        assert body is not None
        extra: list[tuple[bytes, bytes]] = [sample]
        if gzipped:
            extra.append((b"content-encoding", b"gzip"))
        async with self._senders:
            await _respond(send, 200, body, content_type, extra, head=method == "HEAD")

    async def _amps(self, send: Send, method: str, path: str, headers: dict[str, str]) -> None:
        as_json = path.endswith(".json")
        bare = path.removesuffix(".json").rstrip("/") or "/amps"
        segments = bare.split("/")[2:]  # "/amps/a/b" -> ["a", "b"]
        gzipped = gzip_accepted(headers.get("accept-encoding", ""))

        async def produce(snap: BrokerSnapshot) -> bytes | None:
            # On the loop: orjson writes the 2,000-client tree (0.9 MB) in about a millisecond.
            return _amps_body(await self._tree_for(snap), segments, bare, as_json)

        try:
            sample, body = await self._body((as_json, bare), produce, gzipped)
        except Exception as exc:
            log.exception("building the /amps tree failed")
            await _respond(send, 500, f"Reading statistics failed: {exc}\n".encode(), _TEXT)
            return
        if body is None:
            await _respond(send, 404, f"No statistic at {bare}. Start from /amps.json.\n".encode(), _TEXT)
        else:
            content_type = "application/json" if as_json else "text/html; charset=utf-8"
            extra = [sample, (b"content-encoding", b"gzip")] if gzipped else [sample]
            async with self._senders:
                await _respond(send, 200, body, content_type, extra, head=method == "HEAD")

    async def _administrator(self, send: Send, name: str, query: bytes) -> None:
        if name == _INDEX:
            try:
                catalog = list(self.actions_catalog()) if self.actions_catalog is not None else None
                body = orjson.dumps(actions_index(self.admin_actions, catalog), option=orjson.OPT_INDENT_2)
            except Exception as exc:
                log.exception("listing the actions failed")
                await _respond(send, 500, f"Listing the actions failed: {exc!r}\n".encode(), _TEXT)
                return
            await _respond(send, 200, body + b"\n", "application/json")
            return
        if not name:
            listing = "".join(_listing_line(n, a) for n, a in sorted(self.admin_actions.items()))
            if listing and (self.actions_catalog is not None or any(n.startswith(_INDEX + "/")
                                                                    for n in self.admin_actions)):
                listing = f"{_ADMIN_PREFIX}/{_INDEX}  Index of the configured actions (JSON)\n" + listing
            await _respond(
                send, 200, (listing or "No administrator actions are configured.\n").encode(), _TEXT
            )
            return
        action = self.admin_actions.get(name)
        if action is None:
            known = ", ".join(sorted(self.admin_actions)) or "none"
            message = f"Unknown administrator action '{name}'. Configured: {known}.\n"
            await _respond(send, 404, message.encode(), _TEXT)
            return
        status = 200
        try:
            if isinstance(action, AdminEndpoint):
                status, result = await action.handler(_parameters(query))
            else:
                result = await action()
        except ParameterError as exc:
            await _respond(send, 400, f"Action '{name}' refused: {exc}\n".encode(), _TEXT)
            return
        except BrokerError as exc:
            log.warning("administrator action %s failed: %s", name, exc)
            await _respond(send, 500, f"Action '{name}' failed: {exc}\n".encode(), _TEXT)
            return
        except Exception as exc:
            log.exception("administrator action %s crashed", name)
            await _respond(send, 500, f"Action '{name}' crashed: {exc!r}\n".encode(), _TEXT)
            return
        await _respond(send, status, (result if result.endswith("\n") else result + "\n").encode(), _TEXT)


def actions_index(admin_actions: Mapping[str, AdminAction],
                  catalog: Sequence[ActionDescription] | None) -> dict[str, Any]:
    """What ``GET /amps/administrator/actions`` answers.

    Args:
        admin_actions: The administrator actions by path (the REST ones are below ``actions/``).
        catalog: Every configured action (``ActionRuntime.describe()``), or ``None`` when unknown.

    Returns:
        ``{"rest": [...], "actions": [...]}``: each REST action's ``path``, ``name``, ``description``,
        ``action`` (the configured action it runs, when known), ``required`` parameter names and ``optional``
        parameters (``{"name", "default"}``: the other variables its steps use; one not sent expands to the
        empty string); and each configured action's ``name``, ``where``, ``triggers``, ``steps`` and
        ``variables``.
    """
    by_path: dict[str, ActionDescription] = {}
    for described in catalog or ():
        for trigger in described.triggers:
            if trigger.get("Path"):
                by_path.setdefault(trigger["Path"].strip(), described)
    rest: list[dict[str, Any]] = []
    for key, action in sorted(admin_actions.items()):
        if not key.startswith(_INDEX + "/"):
            continue
        path = key[len(_INDEX) + 1:]
        endpoint = action if isinstance(action, AdminEndpoint) else None
        runs = by_path.get(path)
        required = list(endpoint.required) if endpoint is not None else []
        rest.append({
            "path": f"{_ADMIN_PREFIX}/{key}",
            "name": (endpoint.name if endpoint is not None else "") or path,
            "description": endpoint.description if endpoint is not None else "",
            "action": runs.name if runs is not None else None,
            "required": required,
            "optional": [{"name": v, "default": ""} for v in (runs.variables if runs else ()) if v not in required],
        })
    actions = [{"name": a.name, "where": a.where, "triggers": [dict(t) for t in a.triggers], "steps": list(a.steps),
                "variables": list(a.variables)} for a in catalog or ()]
    return {"rest": rest, "actions": actions}


def _amps_body(tree: dict[str, Any], segments: list[str], bare: str, as_json: bool) -> bytes | None:
    """The JSON or HTML of the node at ``segments`` (``None`` when there is none)."""
    found = select(tree, segments)
    if found is None:
        return None
    wrapped, node = found
    return orjson.dumps(wrapped) if as_json else render_node(node, bare).encode()


def _refuse_request(path: str, query: bytes) -> tuple[int, str] | None:
    """``(status, message)`` when the path or query string is beyond the documented bounds, else ``None``."""
    if len(path.encode("utf-8", errors="replace")) > MAX_PATH_BYTES:
        return 414, f"Request path longer than {MAX_PATH_BYTES} bytes; statistics paths are short (/amps.json).\n"
    if path.count("/") > MAX_PATH_SEGMENTS:
        return 400, f"Request path has more than {MAX_PATH_SEGMENTS} segments; start from /amps.json.\n"
    if len(query) > MAX_QUERY_BYTES:
        return 414, f"Query string longer than {MAX_QUERY_BYTES} bytes.\n"
    return None


def _listing_line(name: str, action: AdminAction) -> str:
    about = action.listing() if isinstance(action, AdminEndpoint) else ""
    return f"{_ADMIN_PREFIX}/{name}{'  ' + about if about else ''}\n"


def _parameters(query: bytes) -> dict[str, str]:
    """The query string as name -> value (the last value of a repeated name; blank values kept)."""
    pairs = parse_qs(query.decode("utf-8", errors="replace"), keep_blank_values=True)
    return {name: values[-1] for name, values in pairs.items()}


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _method_not_allowed(send: Send, allow: str) -> None:
    await _respond(
        send, 405, f"Method not allowed; use {allow}.\n".encode(), _TEXT, [(b"allow", allow.encode())]
    )


async def _respond(
    send: Send,
    status: int,
    body: bytes,
    content_type: str,
    extra_headers: list[tuple[bytes, bytes]] | None = None,
    *,
    head: bool = False,
) -> None:
    headers = [
        (b"content-type", content_type.encode("latin-1")),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
        *(extra_headers or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if head else body})
