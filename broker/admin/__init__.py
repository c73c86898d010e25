"""The Admin HTTP server: Prometheus ``/metrics``, the AMPS ``/amps`` statistics tree, administrator
actions. Implementation lives in :mod:`broker.admin.app` (the ASGI app) and :mod:`broker.admin.server`
(hypercorn on trio)."""

from broker.admin.app import AdminAction, AdminApp, AdminEndpoint
from broker.admin.sampler import StatisticsSampler
from broker.admin.server import serve_admin

__all__ = ["AdminAction", "AdminApp", "AdminEndpoint", "StatisticsSampler", "serve_admin"]
