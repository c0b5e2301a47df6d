"""List-then-watch of Kubernetes objects, resumed and re-listed as the API requires.

The official ``kubernetes`` client blocks, so a :class:`ListWatch` runs in a
thread of its own. It lists (paged), then watches from the list's
resourceVersion with bookmarks. A watch that ends is resumed from the last
resourceVersion seen; 410 Gone (an HTTP 410 or an ``ERROR`` event with code
410) means that version is no longer retained, so it lists again. Other
failures (connection refused while the API server restarts, 5xx, timeouts)
are retried with capped exponential backoff, resuming the watch where it was.
Used by the node-condition watcher (Nodes) and the checkpoint relay (Pods).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import urllib3
from kubernetes import watch as k8s_watch
from kubernetes.client.rest import ApiException

log = logging.getLogger("gpu_remediation.watcher")

_GONE = 410


class ListWatch:
    """List-then-watch of one kind of object, in a thread of its own.

    Args:
        list_call: The client's list method (``list_node``, ``list_pod_for_all_namespaces``).
        selector: Label selector sent to the API server ("" selects every object).
        on_list: Called (from this thread) with a complete list's raw objects.
        on_event: Called (from this thread) with ``(ADDED|MODIFIED|DELETED, raw object)``.
        kind: What is watched, for the logs ("node", "pod").
        watch_timeout: Seconds each watch request lasts before it is resumed.
        page_size: Nodes per list page.
        backoff_initial: First delay after a failure, in seconds.
        backoff_max: Cap of the exponential backoff, in seconds.
        request_timeout: Client-side timeout of list requests, in seconds.
    """

    def __init__(
        self,
        list_call: Callable[..., Any],
        selector: str,
        on_list: Callable[[list[dict[str, Any]]], None],
        on_event: Callable[[str, dict[str, Any]], None],
        *,
        kind: str = "object",
        watch_timeout: int = 300,
        page_size: int = 500,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        request_timeout: float = 60.0,
    ) -> None:
        self._list_call = list_call
        self._selector = selector
        self._on_list = on_list
        self._on_event = on_event
        self.delivered_version = 0
        """The resourceVersion of the last list or event handed on (0: none yet)."""
        self._kind = kind
        self._watch_timeout = watch_timeout
        self._page_size = page_size
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._request_timeout = request_timeout
        self._stopping = threading.Event()
        self._watch: k8s_watch.Watch | None = None
        self.lists = 0
        """How many complete lists were taken (the first, then one per 410 or resync)."""

    def stop(self) -> None:
        """Ask the loop to end; an open watch is interrupted (safe from any thread)."""
        self._stopping.set()
        current = self._watch
        if current is not None:
            current.stop()

    def run(self) -> None:
        """List and watch until :meth:`stop`; never raises (failures are retried)."""
        version: str | None = None
        failures = 0
        while not self._stopping.is_set():
            delay = 0.0
            try:
                if version is None:
                    version = self._list()
                version, progressed = self._follow(version)
                failures = 0 if progressed else failures + 1
                if failures:
                    delay = self._backoff(failures)
            except ApiException as err:
                failures += 1
                if err.status == _GONE:
                    # The version left the server's window: take a fresh list. The
                    # first time at once; a server that keeps answering 410 is
                    # backed off like any other failure.
                    log.info("%s watch expired (410 Gone); listing again", self._kind)
                    version = None
                    delay = 0.0 if failures == 1 else self._backoff(failures)
                else:
                    delay = self._backoff(failures)
                    log.warning(
                        "Kubernetes API error %s %s; retrying in %.1fs",
                        err.status,
                        err.reason,
                        delay,
                    )
            except (urllib3.exceptions.HTTPError, OSError) as err:
                if self._stopping.is_set():
                    break  # the interrupted watch
                failures += 1
                delay = self._backoff(failures)
                log.warning("Kubernetes API unreachable (%s); retrying in %.1fs", err, delay)
            except Exception:
                if self._stopping.is_set():
                    break
                # Unexpected (a malformed stream, a bug): start over from a list.
                failures += 1
                version = None
                delay = self._backoff(failures)
                log.exception("%s watch failed; listing again in %.1fs", self._kind, delay)
            if delay and self._stopping.wait(delay):
                break
        log.info("%s watch stopped", self._kind)

    def _backoff(self, failures: int) -> float:
        return float(min(self._backoff_initial * 2 ** (failures - 1), self._backoff_max))

    def _list(self) -> str:
        items: list[dict[str, Any]] = []
        version: str | None = None
        token: str | None = None
        while True:
            response = self._list_call(
                label_selector=self._selector or None,
                limit=self._page_size,
                _continue=token,
                _preload_content=False,
                _request_timeout=self._request_timeout,
            )
            try:
                body = json.loads(response.data)
            finally:
                response.release_conn()
            metadata = body.get("metadata") or {}
            # A paged list is one snapshot: its first page's version is the list's.
            version = version or metadata.get("resourceVersion")
            items += [item for item in body.get("items") or [] if isinstance(item, dict)]
            token = metadata.get("continue") or None
            if token is None:
                break
        if not version:
            raise ValueError(f"{self._kind} list without a resourceVersion")
        self.lists += 1
        log.info(
            "listed %d %s(s) matching %r at version %s",
            len(items),
            self._kind,
            self._selector,
            version,
        )
        self._on_list(items)
        self._delivered(version)
        return version

    def _follow(self, version: str) -> tuple[str, bool]:
        """Watch from ``version`` until the stream ends; return the last version seen.

        The second value says whether the watch made progress (delivered an
        event or lasted a while), so a server that ends every watch at once is
        backed off instead of hammered.
        """
        w = _RawWatch()
        self._watch = w
        started = time.monotonic()
        events = 0
        try:
            if self._stopping.is_set():
                return version, True
            for event in w.stream(
                self._list_call,
                label_selector=self._selector or None,
                resource_version=version,
                allow_watch_bookmarks=True,
                timeout_seconds=self._watch_timeout,
                _request_timeout=(self._request_timeout, self._watch_timeout + 30),
            ):
                events += 1
                version = self._handle(event) or version
                if self._stopping.is_set():
                    break
        finally:
            self._watch = None
        return version, events > 0 or time.monotonic() - started >= 1.0

    def _handle(self, event: Any) -> str | None:
        # Only the raw JSON is used, and validated here (see _RawWatch).
        kind = event.get("type") if isinstance(event, dict) else None
        obj = event.get("raw_object") if isinstance(event, dict) else None
        if not isinstance(obj, dict):
            raise ValueError(f"malformed watch event: {event!r:.200}")
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self._on_event(kind, obj)
        elif kind != "BOOKMARK":
            log.warning("ignoring a watch event of type %r", kind)
        if not isinstance(version, str) or not version:
            return None
        self._delivered(version)
        return version

    def _delivered(self, version: str) -> None:
        # Kubernetes calls resource versions opaque; the emulator's (and etcd's) are
        # integers, and only the clock-free what-if reads this.
        if version.isdigit():
            self.delivered_version = max(self.delivered_version, int(version))


async def stop_watch(source: ListWatch, thread: threading.Thread, limit_s: float = 5.0) -> bool:
    """Stop ``source`` and wait for its thread (at most ``limit_s``); whether it ended.

    ``stop()`` is repeated: a watch that was just being opened when it was first
    called could miss it (``Watch.stream`` resets its stop flag when it starts).
    """
    deadline = time.monotonic() + limit_s
    while thread.is_alive() and time.monotonic() < deadline:
        source.stop()
        await asyncio.to_thread(thread.join, 0.1)
    return not thread.is_alive()


class _RawWatch(k8s_watch.Watch):  # type: ignore[misc]
    """The client's watch without building its models from each event.

    ``Watch.stream`` turns every event into the client's model objects (about
    0.5 ms per Node against 10 µs to parse the JSON, ``bench/watcher``), and only
    the raw object is read here. Its ``deserialize=False`` mode would skip that
    but also its handling of ``ERROR`` events, so a 410 inside the stream would
    not surface as an ApiException; this keeps that handling and parses only.
    """

    def unmarshal_event(self, data: str, return_type: Any) -> dict[str, Any] | None:
        if not data or data.isspace():
            return None
        try:
            event = json.loads(data)
        except json.JSONDecodeError:
            return None
        if not isinstance(event, dict):
            return None
        event["raw_object"] = event.get("object")
        obj = event["raw_object"]
        version = (
            (obj.get("metadata") or {}).get("resourceVersion") if isinstance(obj, dict) else None
        )
        if isinstance(version, str) and version:
            self.resource_version = version
        return event
