"""Prometheus metrics of the triggers: the Alertmanager receiver and the watcher.

Each service keeps its own registry (``prometheus_client``), served on its
own ``/metrics``: the receiver's on its HTTP app, the watcher's on its health
endpoint (``gpu_remediation.health``). Process metrics (CPU, memory, file
descriptors) are included. The worker's metrics come from the Temporal SDK
instead (``workflows.metrics``, ``gpu_remediation.telemetry``).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

PREFIX = "gpu_remediation_"
RECEIVER_REQUESTS = PREFIX + "receiver_requests_total"
RECEIVER_REQUEST_DURATION = PREFIX + "receiver_request_duration_seconds"
RECEIVER_IN_FLIGHT = PREFIX + "receiver_requests_in_flight"
RECEIVER_ALERTS = PREFIX + "receiver_alerts_total"
WATCHER_REPORTS = PREFIX + "watcher_reports_total"
WATCHER_REPORTS_DROPPED = PREFIX + "watcher_reports_dropped_total"
WATCHER_REPORTS_REFUSED = PREFIX + "watcher_reports_refused_total"
WATCHER_DELIVERY_FAILURES = PREFIX + "watcher_delivery_failures_total"
WATCHER_OUTBOX = PREFIX + "watcher_outbox_reports"
WATCHER_LISTS = PREFIX + "watcher_node_lists"

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return registry


def _base(name: str) -> str:
    # prometheus_client appends _total to counters itself.
    return name.removesuffix("_total")


class ReceiverMetrics:
    """Request counts and latencies by route, and alerts by outcome."""

    def __init__(self) -> None:
        self.registry = _registry()
        self.requests = Counter(
            _base(RECEIVER_REQUESTS),
            "HTTP requests by route, method and status code.",
            ["route", "method", "code"],
            registry=self.registry,
        )
        self.duration = Histogram(
            RECEIVER_REQUEST_DURATION,
            "HTTP request duration by route and method.",
            ["route", "method"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.in_flight = Gauge(
            RECEIVER_IN_FLIGHT, "HTTP requests being served.", registry=self.registry
        )
        self.alerts = Counter(
            _base(RECEIVER_ALERTS),
            "Alerts received, by what became of them (delivered, duplicate, no_incident, "
            "unmapped, unknown_node, refused).",
            ["outcome"],
            registry=self.registry,
        )

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format."""
        return generate_latest(self.registry)


class RequestMetricsMiddleware:
    """ASGI middleware counting requests and timing them (plain ASGI: cheap in storms).

    Args:
        app: The wrapped application.
        metrics: Where to count.
        routes: Paths reported by name; any other path is reported as ``other``
            (scanners must not create a series per path).
    """

    def __init__(self, app: ASGIApp, metrics: ReceiverMetrics, routes: Iterable[str]) -> None:
        self._app = app
        self._metrics = metrics
        self._routes = frozenset(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request, then count it with its status and duration."""
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        path = scope.get("path", "")
        route = path if path in self._routes else "other"
        method = scope.get("method", "GET")
        status = 500  # an app that raises before answering is answered 500 by the server
        started = time.perf_counter()

        async def send_counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        self._metrics.in_flight.inc()
        try:
            await self._app(scope, receive, send_counted)
        finally:
            self._metrics.in_flight.dec()
            self._metrics.requests.labels(route, method, str(status)).inc()
            self._metrics.duration.labels(route, method).observe(time.perf_counter() - started)


class WatcherMetrics:
    """Reports delivered, dropped, refused and waiting; node lists taken."""

    def __init__(self) -> None:
        self.registry = _registry()
        self.reports = Counter(
            _base(WATCHER_REPORTS),
            "Reports delivered to incidents, by kind (report, update, clear).",
            ["kind"],
            registry=self.registry,
        )
        self.dropped = Counter(
            _base(WATCHER_REPORTS_DROPPED),
            "Reports refused for good as invalid (by validation or Temporal's "
            "INVALID_ARGUMENT; logged as errors).",
            registry=self.registry,
        )
        self.refused = Counter(
            _base(WATCHER_REPORTS_REFUSED),
            "New reports refused for lack of room, by reason (node_queue_full, outbox_full; "
            "logged as warnings).",
            ["reason"],
            registry=self.registry,
        )
        self.delivery_failures = Counter(
            _base(WATCHER_DELIVERY_FAILURES),
            "Report deliveries Temporal did not take (the reports wait and are retried).",
            registry=self.registry,
        )
        self.outbox = Gauge(WATCHER_OUTBOX, "Reports waiting for Temporal.", registry=self.registry)
        self.lists = Gauge(
            WATCHER_LISTS,
            "Complete node lists taken (the first, then one per 410 Gone or resync).",
            registry=self.registry,
        )

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format."""
        return generate_latest(self.registry)
