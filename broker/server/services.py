"""The services a connection works with, handed to it as one frozen value (hypercorn's ``WorkerContext``).

The kernel (:mod:`broker.server.kernel`) builds one :class:`SessionServices` per broker; the transports give it
to each :class:`~broker.server.session.Session`, :class:`~broker.server.websocket.WebSocketStream` and bookmark
replay (:mod:`broker.server.replay`). A connection reaches nothing else of the broker: not the kernel, not
another connection's state.

Layers of ``broker/server``, lowest first (an import may only go down or sideways; pinned by
``tests/server/test_server_layering.py``):

1. parts: ``counters``, ``client_names``, ``outbound``, ``sockio``, ``recovery``, ``replay_frames``, ``pauses``,
   ``gctuning``, ``gilswitch``, ``refusal_log``
2. services: ``durability``, ``client_registry``, ``replay_registry``, ``maintenance``, ``security_reload``,
   ``statistics_assembly``
3. this module, ``services``
4. connections: ``querystream``, ``publish_batch``, ``replay``, ``websocket``, ``session_queries``, ``session``
5. ``transport``
6. ``kernel`` (builds and runs everything; :func:`~broker.server.kernel.open_broker`)
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from broker.config.model import Config
from broker.engine.engine import Engine
from broker.security.runtime import SecurityRuntime
from broker.server.client_registry import ClientRegistry
from broker.server.counters import BrokerCounters
from broker.server.durability import Durability
from broker.server.refusal_log import RefusalLog
from broker.server.replay_registry import ReplayRegistry


@dataclass(frozen=True)
class SessionServices:
    """What a connection may use of its broker.

    Attributes:
        config: The configuration (read only).
        version: The version string sent in logon acks.
        engine: Routing, SOW topics, subscriptions.
        durability: The journal, persisted acks.
        clients: The connected clients, client names, the memory budget.
        replays: The bookmark replays running.
        security: Authentication and entitlement modules per transport, the audit log.
        counters: The broker's own totals.
        message_type: A message type by name.
        websocket_hint: Where a WebSocket client should connect (for the log line of a wrong-port request).
        ids: Numbers this broker's connections (``client-1``, ``client-2``...).
        filter_compile_limiter: Long filters compile in worker threads one at a time: a client sending many
            of them holds one thread, and the GIL, at most.
        refusals: Refused publishes logged in summary.
    """

    config: Config
    version: str
    engine: Engine
    durability: Durability
    clients: ClientRegistry
    replays: ReplayRegistry[Any]
    security: SecurityRuntime
    counters: BrokerCounters
    message_type: Callable[[str], Any]
    websocket_hint: Callable[[], str]
    ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    filter_compile_limiter: trio.CapacityLimiter = field(default_factory=lambda: trio.CapacityLimiter(1))
    refusals: RefusalLog = field(default_factory=RefusalLog)
