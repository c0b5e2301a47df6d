"""Stragglers: a pod slower than the rest of its gang, from the step times jobs write.

Pure logic, no I/O and no clock of its own: the checkpoint relay
(``triggers.checkpoint_relay``) feeds it every pod it sees, with "now", and
delivers what it answers through the watcher's outbox. The approach is the one
of the straggler studies (Falcon, arXiv 2410.12588, published as Greyhound, USENIX ATC '25):
compare each rank with its peers in the same job, and want it slow for a while.

The rules (also in docs/architecture.md, "Stragglers"):

- A pod takes part when it runs (phase Running) on a node, requests GPUs
  (``nvidia.com/gpu``), names its job with one of ``jobs.label_keys`` and
  carries a readable ``gpu-remediation.io/step-time`` value
  (docs/checkpoint-contract.md, "Step times"). Its gang is its job in its
  namespace. The node is the pod's binding (``spec.nodeName``); the value only
  says how long the pod's steps took. The watcher drops a report for a node it
  does not watch.
- A gang is judged only with at least ``min_gang`` fresh reports (seen within
  ``stale_after``): a gang of one or two has no median to compare with, and a
  pod that stopped reporting is left out, not judged.
- A new report (a step past the pod's last one) is slow when its time is above
  the median of its gang's fresh reports times ``1 + margin``. A pod whose
  reports in a row are slow over ``min_steps`` steps (from the first slow
  report's window to its latest step; the job counts them) and, on the
  detector's own clock, over ``min_span`` and two reports at least, is a
  straggler: reported once, with ``StragglerEvidence`` for its node.
- A report that is not slow ends the streak; a straggler's node then gets the
  clear. A pod that ends does not clear it: its job finishing does not make the
  node fast, and the incident's diagnostic on the idle node decides (the pod is
  forgotten). A step that goes back (the job restarted from a checkpoint)
  starts the pod afresh.
- Memory is bounded: at most ``max_pods`` pods; pods that end, are deleted, are
  missing from a re-list or have not reported for four ``stale_after`` are
  forgotten; an unreadable value is remembered by its digest.
- Report ids are derived from the pod's uid and its streak's first step (a
  clear adds ``:cleared``): a report sent again is deduplicated by the incident.
  A restarted relay knows no streak: it may report a pod again, and cannot
  clear what it did not report (that incident goes on to its diagnostic).

What a tenant can do with it is bounded (docs/security.md, "Stragglers"): it
writes the times, so it can name only nodes its own pods run on, and the
straggler fault class diagnoses an idle node at most.
"""

from __future__ import annotations

import bisect
import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from checkpoint_client.protocol import STEP_TIME_ANNOTATION, ProtocolError, parse_step_time
from gpu_remediation.models import StragglerEvidence
from gpu_remediation.policy import StragglerPolicy

SOURCE = "straggler-detector"
GPU_RESOURCE = "nvidia.com/gpu"
"""``source`` of every piece of evidence the detector raises."""

MAX_PODS = 200_000
"""Pods tracked at most by default (a few hundred bytes each)."""

ReportKind = Literal["report", "clear"]


@dataclass(frozen=True)
class StragglerReport:
    """Evidence the relay must deliver to a node's incident.

    Attributes:
        node: Node name (the slow pod's, as the API server bound it).
        kind: ``report`` (the pod became a straggler) or ``clear`` (it is not any more).
        report_id: Idempotency key (deterministic per streak).
        evidence: What to send.
    """

    node: str
    kind: ReportKind
    report_id: str
    evidence: StragglerEvidence


@dataclass
class _Pod:
    gang: tuple[str, str]
    node: str
    name: str
    step: int
    seconds: float
    seen: datetime
    slow_from: int | None = None
    """First step of the current streak of slow reports."""
    slow_since: datetime | None = None
    """When the detector saw the streak's first slow report."""
    slow_reports: int = 0
    reported: str | None = None
    """The report id of the straggler report sent for the current streak."""
    evidence: StragglerEvidence | None = None


@dataclass
class _Gang:
    """A gang's pods, and its fresh step times kept sorted: a report's median without a sort.

    Each report replaces its pod's time (a bisect into the sorted times, and a move
    to the end of the order they were seen in); times older than the freshness
    window leave from the front of that order. So a report costs the logarithm of
    the gang's size plus a memmove, not a scan and a sort of the whole gang: a gang
    of thousands of ranks reporting every step stays linear in its reports. "Now"
    is taken to move forward (the relay's clock): a time that left stays out.
    """

    members: set[str] = field(default_factory=set)
    seen: OrderedDict[str, tuple[datetime, float]] = field(default_factory=OrderedDict)
    """Pod uid to when its time was seen and the time, oldest first."""
    times: list[float] = field(default_factory=list)
    """The fresh times, sorted."""

    def update(self, uid: str, now: datetime, seconds: float) -> None:
        """``uid`` reported ``seconds`` a step at ``now``."""
        self.drop(uid)
        self.seen[uid] = (now, seconds)
        bisect.insort(self.times, seconds)

    def drop(self, uid: str) -> None:
        """Leave ``uid``'s time out (it ended, or a new one replaces it)."""
        old = self.seen.pop(uid, None)
        if old is not None:
            del self.times[bisect.bisect_left(self.times, old[1])]

    def fresh(self, since: datetime) -> list[float]:
        """The sorted times seen at ``since`` or later (older ones leave for good)."""
        while self.seen:
            uid, (seen, _) = next(iter(self.seen.items()))
            if seen >= since:
                break
            self.drop(uid)
        return self.times


def _median(ordered: list[float]) -> float:
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


class StragglerDetector:
    """Finds pods slower than their gang's median, from the step times they write.

    Args:
        policy: The thresholds (``triggers.stragglers``).
        label_keys: Pod label keys, in order, whose value names the pod's job
            (``jobs.label_keys``).
        gpu_resource: The extended resource a pod must request to take part.
        max_pods: Pods tracked at most; past it, new pods are refused and counted.
    """

    def __init__(
        self,
        policy: StragglerPolicy,
        label_keys: list[str],
        *,
        gpu_resource: str = GPU_RESOURCE,
        max_pods: int = MAX_PODS,
    ) -> None:
        self._policy = policy
        self._gpu_resource = gpu_resource
        self._max_pods = max_pods
        self._swept: datetime | None = None
        self._label_keys = list(label_keys)
        self._pods: dict[str, _Pod] = {}
        self._gangs: dict[tuple[str, str], _Gang] = {}
        self.refused = 0
        """Pods not tracked because ``max_pods`` were."""
        self.unreadable = 0
        """Step-time values that broke the contract (each pod's value counted once)."""
        self._unreadable_seen: dict[str, str] = {}
        """Pod uid to the digest of its unreadable value (counted once per value)."""

    def __len__(self) -> int:
        return len(self._pods)

    def observe(self, kind: str, pod: dict[str, Any], now: datetime) -> list[StragglerReport]:
        """Take one pod event (``ADDED``, ``MODIFIED``, ``DELETED`` or ``LISTED``).

        Returns:
            The reports to deliver (at most one).
        """
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        if not uid:
            return []
        self._sweep(now)
        spec = pod.get("spec") or {}
        phase = (pod.get("status") or {}).get("phase")
        if kind == "DELETED" or phase != "Running":
            self._forget(uid)  # an ended pod neither reports nor clears (see above)
            return []
        raw = (meta.get("annotations") or {}).get(STEP_TIME_ANNOTATION)
        node = spec.get("nodeName")
        job = self._job(meta)
        if not isinstance(raw, str) or not isinstance(node, str) or not node or job is None:
            return []
        if not self._requests_gpus(spec):
            return []
        try:
            step_time = parse_step_time(raw)
        except ProtocolError:
            digest = hashlib.sha256(raw.encode(errors="replace")).hexdigest()[:16]
            if self._unreadable_seen.get(uid) != digest and (
                uid in self._unreadable_seen or len(self._unreadable_seen) < self._max_pods
            ):
                self._unreadable_seen[uid] = digest
                self.unreadable += 1
            return []
        gang = (str(meta.get("namespace") or ""), job)
        name = f"{gang[0]}/{meta.get('name')}"
        current = self._pods.get(uid)
        if current is not None and step_time.step == current.step:
            return []  # the same report seen again (another field of the pod changed)
        if current is None or current.node != node or current.gang != gang:
            if current is None and len(self._pods) >= self._max_pods:
                self.refused += 1
                return []
            self._forget(uid)
            current = _Pod(gang, node, name, step_time.step, step_time.seconds, now)
            self._pods[uid] = current
            self._gangs.setdefault(gang, _Gang()).members.add(uid)
        elif step_time.step < current.step:
            # The job restarted from a checkpoint: its earlier streak says nothing now.
            current.slow_from = None
        current.step, current.seconds, current.seen = step_time.step, step_time.seconds, now
        self._gangs[gang].update(uid, now, step_time.seconds)
        return self._judge(uid, current, step_time.steps, now)

    def resync(self, uids: set[str], now: datetime) -> None:
        """A fresh listing: forget the pods it does not hold (deleted while unwatched)."""
        for uid in [u for u in self._pods if u not in uids]:
            self._forget(uid)
        for uid in [u for u in self._unreadable_seen if u not in uids]:
            del self._unreadable_seen[uid]
        self._swept = now

    def _sweep(self, now: datetime) -> None:
        """Forget, once per ``stale_after``, the pods silent for four of them."""
        every = self._policy.stale_after
        if self._swept is not None and now - self._swept < every:
            return
        self._swept = now
        for uid in [u for u, p in self._pods.items() if now - p.seen > 4 * every]:
            self._forget(uid)

    def _requests_gpus(self, spec: dict[str, Any]) -> bool:
        for container in spec.get("containers") or []:
            resources = (container or {}).get("resources") or {}
            for section in ("limits", "requests"):
                value = (resources.get(section) or {}).get(self._gpu_resource)
                if str(value or "0").strip() not in ("", "0"):
                    return True
        return False

    def _job(self, meta: dict[str, Any]) -> str | None:
        labels = meta.get("labels") or {}
        for key in self._label_keys:
            value = labels.get(key)
            if isinstance(value, str) and value:
                return value
        return None

    def _judge(self, uid: str, pod: _Pod, window: int, now: datetime) -> list[StragglerReport]:
        policy = self._policy
        fresh = self._gangs[pod.gang].fresh(now - policy.stale_after)
        if len(fresh) < policy.min_gang:
            pod.slow_from = None  # too few to compare with: the streak starts over
            return self._clear(uid, pod, now)
        median = _median(fresh)
        if pod.seconds <= median * (1 + policy.margin):
            pod.slow_from = None
            return self._clear(uid, pod, now)
        if pod.slow_from is None:
            pod.slow_from = max(pod.step - window + 1, 0)
            pod.slow_since, pod.slow_reports = now, 0
            pod.reported = None
        pod.slow_reports += 1
        steps = pod.step - pod.slow_from + 1
        if pod.reported is not None or steps < policy.min_steps:
            return []
        assert pod.slow_since is not None
        if pod.slow_reports < 2 or now - pod.slow_since < policy.min_span:
            return []  # the job's own step count is not enough: its word over time
        pod.reported = _report_id(uid, pod.slow_from)
        pod.evidence = StragglerEvidence(
            observed_at=now,
            source=SOURCE,
            job=f"{pod.gang[0]}/{pod.gang[1]}"[:400],
            pod=pod.name[:400],
            slower_by=min(round(pod.seconds / median - 1, 4), 1000.0),
            steps=steps,
            gang=len(fresh),
            message=(
                f"{pod.seconds:.3g}s a step against the gang's median {median:.3g}s "
                f"over {steps} steps"
            ),
        )
        return [StragglerReport(pod.node, "report", pod.reported, pod.evidence)]

    def _clear(self, uid: str, pod: _Pod, now: datetime) -> list[StragglerReport]:
        if pod.reported is None or pod.evidence is None:
            return []
        report_id, evidence = pod.reported, pod.evidence
        pod.reported, pod.evidence = None, None
        cleared = evidence.model_copy(
            update={"observed_at": now, "cleared": True, "message": "back within the margin"}
        )
        return [StragglerReport(pod.node, "clear", f"{report_id}:cleared", cleared)]

    def _forget(self, uid: str) -> None:
        self._unreadable_seen.pop(uid, None)
        pod = self._pods.pop(uid, None)
        if pod is None:
            return
        gang = self._gangs.get(pod.gang)
        if gang is not None:
            gang.members.discard(uid)
            gang.drop(uid)
            if not gang.members:
                del self._gangs[pod.gang]


def _report_id(uid: str, first_step: int) -> str:
    digest = hashlib.sha256(f"{uid}/{first_step}".encode()).hexdigest()[:24]
    return f"straggler-{digest}"
