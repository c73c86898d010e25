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
  parameters and chooses the status (400 for a missing parameter, 409 when busy, 500 on failure).
* ``/`` redirects to ``/amps``. Anything else is 404; a known path with a wrong method is 405.

The application never raises to the server: a failing statistics source or action is logged and
answered with a 500 carrying the error's message.
"""

from __future__ import annotations

import gzip
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

import orjson
from prometheus_client.exposition import choose_encoder, gzip_accepted

from broker.admin.amps_tree import AmpsTreeBuilder, select
from broker.admin.html_view import render_node
from broker.errors import BrokerError
from broker.stats.collector import make_registry
from broker.stats.snapshot import BrokerSnapshot

__all__ = ["AdminAction", "AdminApp", "AdminEndpoint"]

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

_ADMIN_PREFIX = "/amps/administrator"
_TEXT = "text/plain; charset=utf-8"


class AdminApp:
    """The Admin server's ASGI application.

    Args:
        source: Returns the broker's current statistics snapshot (``kernel.statistics``).
        admin_actions: Administrator actions by path below ``/amps/administrator/``. The dict is used
            by reference, so entries added later are served.
        interval: AMPS ``Admin/Interval`` in seconds: the averaging window of ``*_per_sec`` values.
        clock: Returns the current epoch time (uptime and rates).
        runtime_metrics: Include process/Python runtime metrics on ``/metrics``.
    """

    def __init__(
        self,
        source: Callable[[], BrokerSnapshot],
        *,
        admin_actions: dict[str, AdminAction] | None = None,
        interval: float = 10.0,
        clock: Callable[[], float] = time.time,
        runtime_metrics: bool = True,
    ) -> None:
        self.source = source
        self.admin_actions: dict[str, AdminAction] = admin_actions if admin_actions is not None else {}
        self.registry = make_registry(source, clock=clock, runtime_metrics=runtime_metrics)
        self._tree = AmpsTreeBuilder(interval=interval, clock=clock)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry point (``http`` and ``lifespan`` scopes)."""
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return  # websockets are not served; hypercorn closes the connection
        method: str = scope["method"]
        path: str = scope["path"]
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if path == "/metrics":
            if method not in ("GET", "HEAD"):
                await _method_not_allowed(send, "GET, HEAD")
                return
            await self._metrics(send, method, headers, scope.get("query_string", b""))
        elif path == _ADMIN_PREFIX or path.startswith(_ADMIN_PREFIX + "/"):
            if method not in ("GET", "POST"):
                await _method_not_allowed(send, "GET, POST")
                return
            await self._administrator(send, path[len(_ADMIN_PREFIX) :].strip("/"), scope.get("query_string", b""))
        elif path in ("/amps", "/amps.json") or path.startswith("/amps/"):
            if method not in ("GET", "HEAD"):
                await _method_not_allowed(send, "GET, HEAD")
                return
            await self._amps(send, method, path)
        elif path == "/":
            await _respond(send, 302, b"", _TEXT, [(b"location", b"/amps")])
        else:
            await _respond(send, 404, f"Not found: {path}. Try /metrics or /amps.json.\n".encode(), _TEXT)

    async def _metrics(self, send: Send, method: str, headers: dict[str, str], query: bytes) -> None:
        encoder, content_type = choose_encoder(headers.get("accept", ""))
        registry = self.registry
        names = parse_qs(query.decode("latin-1")).get("name[]")
        if names:
            registry = registry.restricted_registry(names)
        try:
            body = encoder(registry)
        except Exception as exc:  # a broken source must not take the endpoint down for good
            log.exception("collecting metrics failed")
            await _respond(send, 500, f"Collecting metrics failed: {exc}\n".encode(), _TEXT)
            return
        extra: list[tuple[bytes, bytes]] = []
        if gzip_accepted(headers.get("accept-encoding", "")):
            body = gzip.compress(body, compresslevel=5)
            extra.append((b"content-encoding", b"gzip"))
        await _respond(send, 200, body, content_type, extra, head=method == "HEAD")

    async def _amps(self, send: Send, method: str, path: str) -> None:
        as_json = path.endswith(".json")
        bare = path.removesuffix(".json").rstrip("/") or "/amps"
        segments = bare.split("/")[2:]  # "/amps/a/b" -> ["a", "b"]
        try:
            tree = self._tree.build(self.source())
        except Exception as exc:
            log.exception("building the /amps tree failed")
            await _respond(send, 500, f"Reading statistics failed: {exc}\n".encode(), _TEXT)
            return
        found = select(tree, segments)
        if found is None:
            await _respond(send, 404, f"No statistic at {bare}. Start from /amps.json.\n".encode(), _TEXT)
            return
        wrapped, node = found
        if as_json:
            await _respond(send, 200, orjson.dumps(wrapped), "application/json", head=method == "HEAD")
        else:
            page = render_node(node, bare).encode()
            await _respond(send, 200, page, "text/html; charset=utf-8", head=method == "HEAD")

    async def _administrator(self, send: Send, name: str, query: bytes) -> None:
        if not name:
            listing = "".join(_listing_line(n, a) for n, a in sorted(self.admin_actions.items()))
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
        except BrokerError as exc:
            log.warning("administrator action %s failed: %s", name, exc)
            await _respond(send, 500, f"Action '{name}' failed: {exc}\n".encode(), _TEXT)
            return
        except Exception as exc:
            log.exception("administrator action %s crashed", name)
            await _respond(send, 500, f"Action '{name}' crashed: {exc!r}\n".encode(), _TEXT)
            return
        await _respond(send, status, (result if result.endswith("\n") else result + "\n").encode(), _TEXT)


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
