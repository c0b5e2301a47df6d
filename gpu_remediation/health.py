"""A minimal HTTP endpoint for probes (and metrics) of the worker and the watcher.

It runs on the service's own event loop, so ``/healthz`` answering at all
shows the loop is not wedged (a liveness probe that only reached a side
thread would not). ``/readyz`` runs the service's readiness check with a
short timeout; ``/metrics`` serves a Prometheus text exposition when given.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger("gpu_remediation.health")

ReadyCheck = Callable[[], Awaitable[tuple[bool, str]]]
READY_TIMEOUT_S = 2.0
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_MAX_REQUEST_LINE = 4096


def parse_bind(bind: str) -> tuple[str, int]:
    """Split ``host:port`` (``[v6]:port`` too; an empty host means every address).

    Raises:
        ValueError: If it is not ``host:port`` with a port from 0 to 65535.
    """
    host, sep, port = bind.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected host:port, got {bind!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


class HealthServer:
    """Serves ``/healthz``, ``/readyz`` and optionally ``/metrics``.

    Args:
        bind: ``host:port`` to listen on (port 0 picks a free one).
        ready: Async check returning (ready, detail); always ready when None.
        metrics: Returns the Prometheus exposition for ``/metrics`` (404 when None).
    """

    def __init__(
        self,
        bind: str,
        *,
        ready: ReadyCheck | None = None,
        metrics: Callable[[], bytes] | None = None,
    ) -> None:
        self._host, self._port = parse_bind(bind)
        self._ready = ready
        self._metrics = metrics
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        """The bound port (after :meth:`start`)."""
        if self._server is None:
            raise RuntimeError("the health server is not started")
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        """Bind and serve in the background."""
        self._server = await asyncio.start_server(self._handle, self._host, self._port)
        log.info("health endpoint on %s:%d (/healthz, /readyz)", self._host, self.port)

    async def stop(self) -> None:
        """Stop listening (requests in progress finish)."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), timeout=5)
            # Headers are read and ignored; probes send a handful.
            while True:
                header = await asyncio.wait_for(reader.readline(), timeout=5)
                if header in (b"\r\n", b"\n", b""):
                    break
            status, content_type, body = await self._answer(line[:_MAX_REQUEST_LINE])
            head = (
                f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode() + body)
            await writer.drain()
        except (TimeoutError, ConnectionError) as err:
            log.debug("health request dropped: %s", err)
        finally:
            writer.close()

    async def _answer(self, line: bytes) -> tuple[str, str, bytes]:
        parts = line.decode("latin-1").split()
        if len(parts) < 2 or parts[0] not in ("GET", "HEAD"):
            return "405 Method Not Allowed", "text/plain", b"GET only\n"
        path = parts[1].split("?", 1)[0]
        if path == "/healthz":
            return "200 OK", "application/json", b'{"status": "ok"}\n'
        if path == "/readyz":
            ready, detail = await self._check_ready()
            body = json.dumps({"ready": ready, "detail": detail}).encode() + b"\n"
            return ("200 OK" if ready else "503 Service Unavailable"), "application/json", body
        if path == "/metrics" and self._metrics is not None:
            return "200 OK", PROMETHEUS_CONTENT_TYPE, self._metrics()
        return "404 Not Found", "text/plain", b"not found\n"

    async def _check_ready(self) -> tuple[bool, str]:
        if self._ready is None:
            return True, "no readiness check"
        try:
            return await asyncio.wait_for(self._ready(), timeout=READY_TIMEOUT_S)
        except TimeoutError:
            return False, f"readiness check took longer than {READY_TIMEOUT_S:g}s"
        except Exception as err:
            # A probe must answer; the failure is the answer.
            return False, f"readiness check failed: {type(err).__name__}: {err}"
