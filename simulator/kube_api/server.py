"""The HTTP server: stdlib ``ThreadingHTTPServer`` speaking HTTP/1.1 with chunked watches.

One thread per connection, so long-lived watches never block other requests. Stopping
the server wakes every handler (watch loops poll a stop flag; idle keep-alive sockets are
shut down) and joins all threads, so no thread outlives :meth:`KubeApiServer.stop`.
"""

from __future__ import annotations

import json
import logging
import select
import socket
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import yaml

from .errors import ApiError, internal
from .faults import Decision, FaultInjector, RequestRecord, reason_for
from .routes import ADMIN_PREFIX, Request, Response, Router, WatchStream, error_response
from .seeding import KubeStore

JSON = dict[str, Any]
log = logging.getLogger(__name__)

# How often a quiet watch checks for shutdown, timeouts and a vanished client.
_WATCH_TICK = 0.2


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = False  # tracked and joined by server_close (block_on_close)
    block_on_close = True
    allow_reuse_address = True

    def __init__(
        self, address: tuple[str, int], router_factory: Callable[[_HTTPServer], Router]
    ) -> None:
        super().__init__(address, _Handler)
        self.stopping = threading.Event()
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        self.router: Router = router_factory(self)
        self.faults: FaultInjector = self.router.faults
        self.bookmark_interval = 1.0
        self._streams = 0
        self._streams_cond = threading.Condition()

    def stream_started(self) -> None:
        """Count an open watch stream."""
        with self._streams_cond:
            self._streams += 1

    def stream_ended(self) -> None:
        """Uncount a watch stream and wake :meth:`wait_streams`."""
        with self._streams_cond:
            self._streams -= 1
            self._streams_cond.notify_all()

    def wait_streams(self, timeout: float) -> bool:
        """Wait until every watch stream has ended; returns whether they all did."""
        with self._streams_cond:
            return self._streams_cond.wait_for(lambda: self._streams == 0, timeout)

    def finish_request(self, request: Any, client_address: Any) -> None:
        with self._conns_lock:
            self._conns.add(request)
            stopping = self.stopping.is_set()
        try:
            if stopping:
                # Accepted while stopping: close_connections may already have run.
                _shutdown_socket(request)
            super().finish_request(request, client_address)
        finally:
            with self._conns_lock:
                self._conns.discard(request)

    def close_connections(self) -> None:
        """Shut down every open connection so blocked handler threads return."""
        with self._conns_lock:
            conns = list(self._conns)
        for conn in conns:
            _shutdown_socket(conn)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that goes away mid-response is normal (watch.stop(), timeouts).
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            log.debug("client %s went away: %s", client_address, exc)
            return
        log.exception("error while serving %s", client_address)


def _shutdown_socket(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError as exc:
        # Already closed by the peer or by the handler: nothing left to unblock.
        log.debug("socket shutdown: %s", exc)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: without TCP_NODELAY each response
    # waits ~40 ms for the client's delayed ACK.
    disable_nagle_algorithm = True
    server: _HTTPServer
    _started = 0.0
    _record_pending = False
    _decision = Decision()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_PUT(self) -> None:
        self._serve()

    def do_PATCH(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    def _serve(self) -> None:
        self._started = time.monotonic()
        url = urlsplit(self.path)
        body = self._read_body()
        admin = url.path.startswith(ADMIN_PREFIX)
        decision = (
            Decision() if admin else self.server.faults.decide(self.command, url.path, url.query)
        )
        self._record_pending = not admin
        self._decision = decision
        try:
            self._respond(url.path, url.query, body, decision)
        finally:
            # Only reached unlogged when the handler failed before answering.
            self._record(None)

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            # Clients streaming a body of unknown size (kubectl may) send it chunked.
            parts: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers carry nothing the emulator uses
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _record(self, status: int | None) -> None:
        # Logged before the last response byte leaves, so a client that has its answer
        # always finds the request in the log.
        if not self._record_pending:
            return
        self._record_pending = False
        url = urlsplit(self.path)
        self.server.faults.record(
            RequestRecord(
                method=self.command,
                path=url.path,
                query=url.query,
                status=status,
                fault=bool(self._decision.rule_ids),
                started=self._started,
                duration=time.monotonic() - self._started,
            )
        )

    def _respond(self, path: str, query: str, body: bytes, decision: Decision) -> None:
        if decision.latency > 0 and self.server.stopping.wait(decision.latency):
            self.close_connection = True
            return
        if decision.drop:
            # Close without any response bytes: the client sees RemoteDisconnected.
            self.close_connection = True
            self._record(None)
            _shutdown_socket(self.connection)
            return
        if decision.status is not None:
            exc = ApiError(
                decision.status,
                reason_for(decision.status),
                decision.message,
                retry_after=decision.retry_after,
            )
            self._send(error_response(exc))
            return
        request = Request(
            method=self.command,
            path=path,
            query=dict(parse_qsl(query, keep_blank_values=True)),
            content_type=self.headers.get("Content-Type", "application/json"),
            body=body,
        )
        try:
            result = self.server.router.handle(request)
        except Exception as exc:
            # A bug in the emulator: answer 500 like a real server and keep the trace.
            log.exception("emulator failure on %s %s", self.command, path)
            result = Response(500, internal(f"{type(exc).__name__}: {exc}").status())
        if isinstance(result, WatchStream):
            self._stream(result)
        else:
            self._send(result)

    def _send(self, resp: Response) -> None:
        if resp.content_type == "application/json":
            data = json.dumps(resp.body, separators=(",", ":")).encode()
        else:
            data = str(resp.body).encode()
        self._record(resp.status)
        self.send_response(resp.status)
        self.send_header("Content-Type", resp.content_type)
        self.send_header("Content-Length", str(len(data)))
        for key, value in resp.headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    # ------------------------------------------------------------------ watches

    def _chunk(self, event: JSON) -> None:
        data = json.dumps(event, separators=(",", ":")).encode() + b"\n"
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _client_gone(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            peeked: bytes = self.connection.recv(1, socket.MSG_PEEK)
            return peeked == b""
        except OSError:
            return True

    def _stream(self, ws: WatchStream) -> None:
        self._record(200)
        self.server.stream_started()
        try:
            self._stream_events(ws)
        finally:
            self.server.stream_ended()

    def _stream_events(self, ws: WatchStream) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        try:
            if ws.error is not None or ws.watcher is None:
                assert ws.error is not None
                self._chunk({"type": "ERROR", "object": ws.error.status()})
            else:
                self._follow(ws)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (ConnectionError, TimeoutError, ValueError) as exc:
            # The client stopped watching (ValueError: write to a closed file).
            log.debug("watch client went away: %s", exc)
            self.close_connection = True

    def _follow(self, ws: WatchStream) -> None:
        watcher = ws.watcher
        assert watcher is not None
        deadline = time.monotonic() + ws.timeout
        interval = self.server.bookmark_interval
        next_bookmark = time.monotonic() + interval
        while True:
            if self.server.stopping.is_set():
                # End the stream cleanly (terminating chunk), as a server shutting down
                # gracefully does; clients see the watch end, not a broken response.
                self.close_connection = True
                return
            now = time.monotonic()
            if now >= deadline:
                return
            try:
                events = watcher.poll(min(_WATCH_TICK, deadline - now), self.server.stopping.is_set)
            except ApiError as exc:
                self._chunk({"type": "ERROR", "object": exc.status()})
                return
            for event in events:
                self._chunk(event)
            if ws.bookmarks and time.monotonic() >= next_bookmark:
                self._chunk(watcher.bookmark())
                next_bookmark = time.monotonic() + interval
            if not events and self._client_gone():
                self.close_connection = True
                return


class KubeApiServer:
    """The emulator as a server in a background thread.

    Use as a context manager (``with KubeApiServer() as api: ...``) or call
    :meth:`start` and :meth:`stop`.

    Args:
        store: The cluster state (a new empty :class:`KubeStore` by default).
        host: Address to bind (loopback by default).
        port: Port to bind; 0 picks a free one.
        faults: Fault injector (new, seed 0, by default).
        bookmark_interval: Seconds between BOOKMARK events on watches that allow them.
        default_watch_timeout: Watch duration when a client gives no timeoutSeconds.
    """

    def __init__(
        self,
        store: KubeStore | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        faults: FaultInjector | None = None,
        bookmark_interval: float = 1.0,
        default_watch_timeout: float = 1800.0,
    ) -> None:
        self.store = store if store is not None else KubeStore()
        self.faults = faults if faults is not None else FaultInjector()
        self._host = host
        self._port = port
        self._bookmark_interval = bookmark_interval
        self._default_watch_timeout = default_watch_timeout
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port (after :meth:`start`)."""
        if self._httpd is None:
            raise RuntimeError("the server is not started")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:40123``."""
        return f"http://{self._host}:{self.port}"

    def start(self) -> KubeApiServer:
        """Bind and serve in a background thread; returns self."""
        if self._httpd is not None:
            raise RuntimeError("the server is already started")

        def make_router(httpd: _HTTPServer) -> Router:
            return Router(
                self.store,
                self.faults,
                server_address=f"{self._host}:{httpd.server_address[1]}",
                default_watch_timeout=self._default_watch_timeout,
            )

        httpd = _HTTPServer((self._host, self._port), make_router)
        httpd.bookmark_interval = self._bookmark_interval
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.02},  # also bounds how long stop() waits
            name=f"kube-api-emulator:{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, end every watch and connection, and join all threads."""
        httpd, thread = self._httpd, self._thread
        if httpd is None or thread is None:
            return
        httpd.stopping.set()
        self.store.wake()
        httpd.shutdown()
        if not httpd.wait_streams(2.0):
            log.warning("watch streams still open after 2 s; closing their connections")
        httpd.close_connections()
        httpd.server_close()
        thread.join()
        self._httpd = None
        self._thread = None

    def restart(self, while_down: Callable[[], None] | None = None) -> KubeApiServer:
        """Stop and start again on the same port, as an API server restart does.

        Every open watch and connection ends (clients reconnect to the address they
        were given); the store, fault rules and request log are kept. From now on
        the server binds this port, whatever port it was created with.

        Args:
            while_down: Called between the stop and the start (e.g. compacting the
                store's watch history, as a restarted etcd-backed server has).

        Raises:
            RuntimeError: The server is not started.
            OSError: The port could not be bound again.
        """
        port = self.port  # raises when not started
        self.stop()
        if while_down is not None:
            while_down()
        self._port = port
        return self.start()

    def __enter__(self) -> KubeApiServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ clients

    def configuration(self) -> Any:
        """A ``kubernetes.client.Configuration`` pointing at this server."""
        from kubernetes import client

        return client.Configuration(host=self.url)

    def api_client(self) -> Any:
        """A fresh ``kubernetes.client.ApiClient`` for this server (close it when done)."""
        from kubernetes import client

        return client.ApiClient(self.configuration())

    def kubeconfig(self, namespace: str = "default") -> JSON:
        """A kubeconfig document for kubectl and ``config.load_kube_config``."""
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emulator", "cluster": {"server": self.url}}],
            "users": [{"name": "emulator", "user": {}}],
            "contexts": [
                {
                    "name": "emulator",
                    "context": {"cluster": "emulator", "user": "emulator", "namespace": namespace},
                }
            ],
            "current-context": "emulator",
            "preferences": {},
        }

    def write_kubeconfig(self, path: str | Path) -> Path:
        """Write :meth:`kubeconfig` as YAML to ``path`` and return it."""
        target = Path(path)
        target.write_text(yaml.safe_dump(self.kubeconfig(), sort_keys=False))
        return target

    def requests(self) -> list[RequestRecord]:
        """The request log (method, path, query, status, whether a fault fired)."""
        return self.faults.requests()

    def reset(self) -> None:
        """Remove every fault rule, request record and object (``POST /_emulator/reset``)."""
        self.faults.clear()
        self.faults.clear_requests()
        self.store.clear()


__all__ = ["KubeApiServer"]
