"""A simulated Alertmanager: GPU alerts delivered to a webhook receiver the way the real one does.

**Prometheus' side** is a rule over the fleet's true state, as dcgm-exporter's
``DCGM_FI_DEV_XID_ERRORS`` with a rule such as ``DCGM_FI_DEV_XID_ERRORS > 0`` and
``for: 1m`` would give: :func:`fleet_alerts` turns every Xid fault on a node into an
alert ``GpuXidError{Hostname, gpu, xid, severity}``; the model fires it once it has
been present for ``rule_for`` and resolves it when it is gone. Simplifications: no
scrape gaps (a rebooting node keeps its alert while its fault is there) and no
Prometheus ``resend_delay`` (the model reads the source itself).

**Alertmanager's side**, as modelled (Alertmanager v0.2x source; the same rules hold in
every release since 0.16):

- *Grouping* (``dispatch/dispatch.go``, ``aggrGroup.run``): alerts are grouped by
  ``alertname`` and the node label, one aggregation group per node. A new group is
  flushed after ``group_wait`` (default 30s), then every ``group_interval`` (5m); a
  flush runs under a timeout of the group interval, at least ``notify.MinTimeout``
  (10s), and the group's next flush waits for it.
- *What a flush sends* (``notify/dedup_stage.go``, ``DedupStage.needsUpdate``), judged
  against the notification log, which only a *successful* notification writes: a group
  never notified is sent if something fires (only resolved alerts: nothing); a firing
  alert the log does not have, a newly resolved one (``send_resolved``, the webhook's
  default) or all of them resolved is sent at once; otherwise the group is sent again
  once ``repeat_interval`` (4h) has passed since the last successful notification. The
  payload is the whole group, firing and resolved alerts.
- *Retries* (``notify/notify.go``, ``RetryStage``): a notification is retried with
  exponential backoff (``cenkalti/backoff`` defaults: 0.5 s, x1.5, +/-50 %, at most
  60 s) until it succeeds or the flush's timeout ends. The webhook counts 2xx as
  success and retries 5xx and connection errors; any other status ends the attempt
  (``notify/util.go``, ``Retrier.Check``).
- *Nothing is lost while the receiver is down*: a failed notification leaves the log as
  it was, so the next flush finds the same difference and sends again, and every later
  one until a notification succeeds. Resolved alerts leave the group once a flush that
  covered them succeeded; an empty group is dropped.
- *Payload* (``notify/webhook/webhook.go``; ``template.Data``): webhook version "4",
  ``groupKey`` ``{}:{<group labels>}`` for the root route, firing alerts with ``endsAt``
  Go's zero time, ``fingerprint`` the label set's 64-bit FNV-1a hash as 16 hex digits
  (``prometheus/common`` ``model.LabelSet.Fingerprint``), ``Authorization: Bearer``
  (``http_config.authorization``).

Not modelled: inhibition, silences, HA peers, templates.

Durations are real seconds (:meth:`AlertmanagerTimings.scaled` divides the defaults by a
fleet's time factor; the retry backoff stays an HTTP client's pace). One dispatcher
thread polls the source and times the flushes; flushes run on a small pool, one at a
time per group, as each group's goroutine runs them.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType

from pydantic import BaseModel, ConfigDict, Field

from simulator.fleet.model import Phase
from simulator.fleet.ports import FleetCore

log = logging.getLogger(__name__)

ALERT_NAME = "GpuXidError"
NODE_LABEL = "Hostname"
"""dcgm-exporter's label for the node (one of the policy's ``alert_node_labels``)."""
RECEIVER = "gpu-remediation"
EXTERNAL_URL = "http://alertmanager.simulated:9093"
ZERO_TIME = "0001-01-01T00:00:00Z"
_FNV_OFFSET = 14695981039346656037
_FNV_PRIME = 1099511628211
_MASK = (1 << 64) - 1
_SEPARATOR = 0xFF

SourceAlert = tuple[dict[str, str], dict[str, str]]
"""(labels, annotations) of an alert the rule finds true now."""
AlertSource = Callable[[], list[SourceAlert]]


def fingerprint(labels: Mapping[str, str]) -> str:
    """Alertmanager's fingerprint of a label set: FNV-1a 64 over sorted pairs, 16 hex digits."""
    value = _FNV_OFFSET
    for name in sorted(labels):
        for part in (name, labels[name]):
            for byte in part.encode():
                value = ((value ^ byte) * _FNV_PRIME) & _MASK
            value = ((value ^ _SEPARATOR) * _FNV_PRIME) & _MASK
    return f"{value:016x}"


def rfc3339(at: datetime) -> str:
    """``2026-12-05T12:00:00.123456Z``."""
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


class AlertmanagerTimings(BaseModel):
    """The rule's ``for``, the route's timers and the retry backoff, in real seconds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rule_for: float = Field(default=60.0, ge=0)
    group_wait: float = Field(default=30.0, ge=0)
    group_interval: float = Field(default=300.0, gt=0)
    repeat_interval: float = Field(default=4 * 3600.0, gt=0)
    min_timeout: float = Field(default=10.0, gt=0)
    retry_initial: float = Field(default=0.5, gt=0)
    retry_multiplier: float = Field(default=1.5, ge=1)
    retry_max: float = Field(default=60.0, gt=0)
    request_timeout: float = Field(default=10.0, gt=0)

    @property
    def flush_timeout(self) -> float:
        """How long one flush may keep retrying its notification."""
        return max(self.group_interval, self.min_timeout)

    @classmethod
    def scaled(cls, time_factor: float) -> AlertmanagerTimings:
        """Alertmanager's defaults (simulated time) at ``time_factor``; the backoff unscaled."""
        d = cls()
        return cls(
            rule_for=d.rule_for / time_factor,
            group_wait=d.group_wait / time_factor,
            group_interval=d.group_interval / time_factor,
            repeat_interval=d.repeat_interval / time_factor,
            min_timeout=d.min_timeout / time_factor,
        )


@dataclass
class AlertEpisode:
    """One firing episode of one alert: what the model did with it."""

    fingerprint: str
    node: str
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: datetime
    ends_at: datetime | None = None
    first_notified_at: datetime | None = None
    """The first notification attempt that carried it firing."""
    acknowledged_at: datetime | None = None
    """The first 2xx answer to a notification that carried it firing."""


@dataclass(frozen=True)
class LogEntry:
    """The notification log's entry of a group: what its last successful notification held."""

    firing: frozenset[str]
    resolved: frozenset[str]
    at: float
    """Monotonic time of that notification."""


def needs_update(
    entry: LogEntry | None,
    firing: frozenset[str],
    resolved: frozenset[str],
    repeat_interval: float,
    now: float,
) -> str | None:
    """Why a flush notifies (``DedupStage.needsUpdate``, send_resolved on), or None."""
    if entry is None:
        return "first notification" if firing else None
    if not firing <= entry.firing:
        return "first notification" if not entry.firing else "new alerts in group"
    if not firing:
        return "all alerts resolved" if entry.firing else None
    if not resolved <= entry.resolved:
        return "new resolved alerts"
    if entry.at < now - repeat_interval:
        return "repeat interval elapsed"
    return None


@dataclass
class _Group:
    key: str
    labels: dict[str, str]
    next_flush: float
    alerts: dict[str, AlertEpisode] = field(default_factory=dict)
    logged: LogEntry | None = None
    flushing: bool = False


class SimulatedAlertmanager:
    """Delivers the source's alerts to one webhook receiver (see the module docstring).

    Args:
        url: The receiver's endpoint (``.../v1/alerts``).
        token: Its bearer token.
        source: The alerts the rule finds true now (called on the dispatcher thread).
        timings: Rule and route timers, retry backoff.
        seed: Seeds the backoff's jitter.
        tick: Seconds between the dispatcher's looks at the source and the timers.
    """

    def __init__(
        self,
        url: str,
        token: str,
        source: AlertSource,
        *,
        timings: AlertmanagerTimings | None = None,
        seed: int = 0,
        tick: float = 0.1,
    ) -> None:
        self.url = url
        self._token = token
        self._source = source
        self.timings = timings or AlertmanagerTimings()
        self._rng = random.Random(f"alertmanager-{seed}")
        self._tick = tick
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._pending: dict[str, float] = {}
        """Fingerprint -> monotonic time the rule first found it true (``for`` running)."""
        self._firing: dict[str, AlertEpisode] = {}
        self._groups: dict[str, _Group] = {}
        self._episodes: list[AlertEpisode] = []
        self._thread: threading.Thread | None = None
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="alertmanager-flush")
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self.notifications = 0
        """Notifications the receiver answered 2xx."""
        self.failed_attempts = 0
        """Attempts that failed (connection error or non-2xx)."""
        self.errors: list[BaseException] = []

    # ------------------------------------------------------------ lifecycle

    def start(self) -> SimulatedAlertmanager:
        """Start the dispatcher thread; returns self."""
        if self._thread is not None:
            raise RuntimeError("the Alertmanager is already started")
        self._thread = threading.Thread(target=self._run, name="alertmanager", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop dispatching; a notification in flight gives up.

        Raises:
            RuntimeError: The dispatcher or a flush failed while running (its error).
        """
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._pool.shutdown(wait=True)
        if self.errors:
            raise RuntimeError(f"simulated Alertmanager failed: {self.errors[0]!r}") from (
                self.errors[0]
            )

    def __enter__(self) -> SimulatedAlertmanager:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------ what it did

    def episodes(self) -> list[AlertEpisode]:
        """Every alert episode so far (copies), oldest first."""
        with self._lock:
            return [dataclasses.replace(e) for e in self._episodes]

    def undelivered(self) -> set[str]:
        """Nodes with an alert firing now that was notified and never acknowledged."""
        with self._lock:
            return {
                e.node
                for e in self._firing.values()
                if e.first_notified_at is not None and e.acknowledged_at is None
            }

    # ------------------------------------------------------------ dispatcher

    def _run(self) -> None:
        try:
            while not self._stopping.wait(self._tick):
                self.dispatch(self._source())
        except Exception as err:
            log.exception("the simulated Alertmanager's dispatcher failed")
            self.errors.append(err)

    def dispatch(self, current: list[SourceAlert]) -> None:
        """One look at the source: fire, resolve, and start the flushes that are due."""
        now, now_m = datetime.now(UTC), time.monotonic()
        found = {fingerprint(labels): (labels, notes) for labels, notes in current}
        with self._lock:
            for fp, (labels, notes) in found.items():
                since = self._pending.setdefault(fp, now_m)
                if fp not in self._firing and now_m - since >= self.timings.rule_for:
                    self._fire(fp, labels, notes, now, now_m)
            for fp in [fp for fp in self._pending if fp not in found]:
                del self._pending[fp]
                episode = self._firing.pop(fp, None)
                if episode is not None:
                    episode.ends_at = now
            for group in self._groups.values():
                if not group.flushing and group.next_flush <= now_m:
                    group.flushing = True
                    group.next_flush = now_m + self.timings.group_interval
                    self._pool.submit(self._flush, group)
            for key in [k for k, g in self._groups.items() if not g.alerts and not g.flushing]:
                del self._groups[key]

    def _fire(
        self, fp: str, labels: dict[str, str], notes: dict[str, str], now: datetime, now_m: float
    ) -> None:
        episode = AlertEpisode(
            fingerprint=fp,
            node=labels.get(NODE_LABEL, ""),
            labels=dict(labels),
            annotations=dict(notes),
            starts_at=now,
        )
        self._episodes.append(episode)
        self._firing[fp] = episode
        group_labels = {k: labels[k] for k in ("alertname", NODE_LABEL) if k in labels}
        body = ", ".join(f'{k}="{v}"' for k, v in sorted(group_labels.items()))
        key = "{}:{" + body + "}"
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = _Group(
                key=key, labels=group_labels, next_flush=now_m + self.timings.group_wait
            )
        group.alerts[fp] = episode  # a new episode replaces a resolved one of the same labels

    # ------------------------------------------------------------ one flush

    def _flush(self, group: _Group) -> None:
        try:
            self._flush_once(group)
        except Exception as err:
            log.exception("a flush of %s failed", group.key)
            self.errors.append(err)
        finally:
            with self._lock:
                group.flushing = False

    def _flush_once(self, group: _Group) -> None:
        now, now_m = datetime.now(UTC), time.monotonic()
        with self._lock:
            alerts = sorted(group.alerts.values(), key=lambda e: e.fingerprint)
            firing = frozenset(e.fingerprint for e in alerts if e.ends_at is None)
            resolved = frozenset(e.fingerprint for e in alerts if e.ends_at is not None)
            reason = needs_update(
                group.logged, firing, resolved, self.timings.repeat_interval, now_m
            )
            body = self._payload(group, alerts, now) if reason else b""
            for e in alerts:
                if reason and e.ends_at is None and e.first_notified_at is None:
                    e.first_notified_at = now
        if reason:
            if not self._send(body, reason, group.key, now_m + self.timings.flush_timeout):
                return  # the log is unchanged: the next flush sends again
            acked = datetime.now(UTC)
            with self._lock:
                group.logged = LogEntry(firing=firing, resolved=resolved, at=now_m)
                for e in alerts:
                    if e.fingerprint in firing and e.acknowledged_at is None:
                        e.acknowledged_at = acked
        with self._lock:
            for e in alerts:
                if e.ends_at is not None and group.alerts.get(e.fingerprint) is e:
                    del group.alerts[e.fingerprint]

    def _payload(self, group: _Group, alerts: list[AlertEpisode], now: datetime) -> bytes:
        items = [
            {
                "status": "firing" if e.ends_at is None else "resolved",
                "labels": e.labels,
                "annotations": e.annotations,
                "startsAt": rfc3339(e.starts_at),
                "endsAt": ZERO_TIME if e.ends_at is None else rfc3339(e.ends_at),
                "generatorURL": f"{EXTERNAL_URL}/graph?g0.expr=DCGM_FI_DEV_XID_ERRORS",
                "fingerprint": e.fingerprint,
            }
            for e in alerts
        ]
        common = dict(alerts[0].labels) if alerts else {}
        for e in alerts[1:]:
            common = {k: v for k, v in common.items() if e.labels.get(k) == v}
        notes = dict(alerts[0].annotations) if alerts else {}
        for e in alerts[1:]:
            notes = {k: v for k, v in notes.items() if e.annotations.get(k) == v}
        payload = {
            "version": "4",
            "groupKey": group.key,
            "truncatedAlerts": 0,
            "status": "firing" if any(i["status"] == "firing" for i in items) else "resolved",
            "receiver": RECEIVER,
            "groupLabels": group.labels,
            "commonLabels": common,
            "commonAnnotations": notes,
            "externalURL": EXTERNAL_URL,
            "alerts": items,
        }
        return json.dumps(payload).encode()

    def _send(self, body: bytes, reason: str, key: str, deadline: float) -> bool:
        """POST until a 2xx, a status not worth retrying, or the deadline."""
        delay = self.timings.retry_initial
        attempt = 0
        while not self._stopping.is_set():
            attempt += 1
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            status, detail = self._post(body, min(remaining, self.timings.request_timeout))
            if status is not None and 200 <= status < 300:
                self.notifications += 1
                return True
            self.failed_attempts += 1
            log.info("notify %s (%s) attempt %d failed: %s", key, reason, attempt, detail)
            if status is not None and status < 500:
                return False  # unrecoverable for this flush; the next one tries again
            wait = delay * self._rng.uniform(0.5, 1.5)
            delay = min(delay * self.timings.retry_multiplier, self.timings.retry_max)
            if self._stopping.wait(max(0.0, min(wait, deadline - time.monotonic()))):
                break
        return False

    def _post(self, body: bytes, timeout: float) -> tuple[int | None, str]:
        request = urllib.request.Request(
            self.url,
            data=body,
            method="POST",
            headers={
                "Content-Type": "application/json",
                "Authorization": f"Bearer {self._token}",
                "User-Agent": "Alertmanager/simulated",
            },
        )
        try:
            with self._opener.open(request, timeout=timeout) as response:
                response.read()
                return int(response.status), f"HTTP {response.status}"
        except urllib.error.HTTPError as err:
            text = err.read()[:200].decode(errors="replace")
            return err.code, f"HTTP {err.code}: {text}"
        except (urllib.error.URLError, OSError) as err:
            return None, f"{type(err).__name__}: {err}"


def fleet_alerts(fleet: FleetCore) -> AlertSource:
    """The rule ``GpuXidError``: one alert per Xid fault present on a node of ``fleet``."""

    def current() -> list[SourceAlert]:
        found: list[SourceAlert] = []
        with fleet.lock:
            for node in fleet.nodes.values():
                if node.phase is Phase.GONE:
                    continue
                for fault in node.faults:
                    if fault.xid is None:
                        continue
                    labels = {
                        "alertname": ALERT_NAME,
                        NODE_LABEL: node.name,
                        "xid": str(fault.xid),
                        "severity": "critical",
                    }
                    if fault.gpu is not None:
                        labels["gpu"] = str(fault.gpu)
                    notes = {
                        "summary": f"Xid {fault.xid} on GPU {fault.gpu} of {node.name}",
                        "description": "DCGM_FI_DEV_XID_ERRORS > 0 for 1m",
                    }
                    found.append((labels, notes))
        return found

    return current
