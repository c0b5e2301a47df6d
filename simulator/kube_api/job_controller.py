"""The job controller's part that decides a Job's fate when its pods end.

The emulator runs no controllers of its own, so a user's batch/v1 Job would never
get a pod nor notice one fail. :class:`JobController` plays the job controller for
Jobs that are not the project's own host-command Jobs (those are
:class:`~simulator.kube_api.jobs.JobKubelet`'s): it creates a new Job's pods from
its template, and when a pod ends it applies the Job's ``podFailurePolicy`` as
Kubernetes does (rules in order, first match wins; ``Ignore`` recreates the pod
without counting it against ``backoffLimit``, ``FailJob`` fails the Job, ``Count``
or no match counts it), then replaces the pod or ends the Job
(``BackoffLimitExceeded``, ``PodFailurePolicy``, ``CompletionsReached``).

That is what makes an eviction harmless to a job run beside gpu-remediation: the
Eviction API marks the pod ``DisruptionTarget`` (``disruption.py``), and a rule
``{action: Ignore, onPodConditions: [{type: DisruptionTarget}]}`` restarts it
without spending a retry (docs/checkpoint-contract.md).

Not modelled: indexed completion, ``successPolicy``, pod backoff delays,
``activeDeadlineSeconds``, suspend, and ``podReplacementPolicy`` (a replacement
is created once the old pod is terminal or gone, like ``TerminatingOrFailed``).
Store hooks run under the store lock, so the hook only queues; one thread does
the writes, through the store's ordinary helpers.
"""

from __future__ import annotations

import copy
import logging
import queue
import threading
from collections.abc import Mapping
from typing import Any

from .errors import ApiError
from .jobs import MANAGED_BY
from .resources import JOBS, PODS
from .seeding import JSON, KubeStore
from .selectors import parse_label_selector
from .watch import Change

log = logging.getLogger(__name__)

DEFAULT_BACKOFF_LIMIT = 6
"""``spec.backoffLimit`` when a Job does not set it (Kubernetes' default)."""
_TERMINAL = frozenset({"Succeeded", "Failed"})


def pod_failure_action(policy: Mapping[str, Any] | None, pod: Mapping[str, Any]) -> str:
    """The action of the first ``podFailurePolicy`` rule a failed pod matches, else Count.

    Args:
        policy: The Job's ``spec.podFailurePolicy`` (None: no policy).
        pod: The failed pod as last seen.
    """
    for rule in (policy or {}).get("rules") or []:
        if _matches(rule, pod):
            return str(rule.get("action", "Count"))
    return "Count"


def _matches(rule: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    codes = rule.get("onExitCodes")
    if codes is not None:
        wanted = set(codes.get("values") or [])
        container = codes.get("containerName")
        for cs in status.get("containerStatuses") or []:
            if container is not None and cs.get("name") != container:
                continue
            code = ((cs.get("state") or {}).get("terminated") or {}).get("exitCode")
            if not isinstance(code, int) or code == 0:
                continue  # Kubernetes matches only non-zero exit codes
            if (code in wanted) == (codes.get("operator") == "In"):
                return True
        return False
    patterns = rule.get("onPodConditions") or []
    conditions = status.get("conditions") or []
    return any(
        c.get("type") == p.get("type") and c.get("status") == p.get("status", "True")
        for p in patterns
        for c in conditions
    )


def _owning_job(pod: Mapping[str, Any]) -> str | None:
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "Job" and ref.get("controller", True):
            return str(ref.get("name"))
    return None


class JobController:
    """Creates user Jobs' pods and applies their pod failure policy when pods end.

    Args:
        store: The emulated cluster.
        skip: Labels of Jobs another simulated controller runs (the project's
            host-command Jobs, run by ``JobKubelet``).
    """

    def __init__(self, store: KubeStore, *, skip: Mapping[str, str] = MANAGED_BY) -> None:
        self.store = store
        self.errors: list[BaseException] = []
        self._skip = parse_label_selector(",".join(f"{k}={v}" for k, v in skip.items()))
        self._queue: queue.Queue[tuple[str, JSON] | None] = queue.Queue()
        self._ended: set[str] = set()  # pod uids already accounted for
        self._thread = threading.Thread(target=self._loop, name="job-controller", daemon=True)
        self._started = False

    def start(self) -> JobController:
        """Begin managing Jobs created and pods ended from now on."""
        if not self._started:
            self._started = True
            self._thread.start()
            self.store.add_hook(self._on_change)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Finish what is queued and stop.

        Raises:
            RuntimeError: A store write failed, so a broken simulation does not pass unnoticed.
        """
        if self._started:
            self._queue.put(None)
            self._thread.join(timeout)
        if self.errors:
            raise RuntimeError(f"simulated job controller failed: {self.errors[0]!r}")

    def idle(self) -> bool:
        """Nothing is queued (tests wait for this before asserting)."""
        return self._queue.unfinished_tasks == 0

    def _on_change(self, change: Change) -> None:
        # Under the store lock: decide and queue a copy, never write from here.
        obj = change.obj
        if change.resource == JOBS.key and change.type == "ADDED":
            if not self._skip.matches((obj.get("metadata") or {}).get("labels") or {}):
                self._queue.put(("job", copy.deepcopy(obj)))
        elif change.resource == PODS.key and _owning_job(obj) is not None:
            phase = (obj.get("status") or {}).get("phase")
            uid = str((obj.get("metadata") or {}).get("uid") or "")
            if (change.type == "DELETED" or phase in _TERMINAL) and uid not in self._ended:
                self._ended.add(uid)
                self._queue.put(("pod", copy.deepcopy(obj)))

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                kind, obj = item
                if kind == "job":
                    self._create_pods(obj)
                else:
                    self._pod_ended(obj)
            except ApiError as exc:
                if exc.code != 404:  # 404: the Job went meanwhile; nothing to do
                    self._failed(exc)
            except Exception as exc:
                self._failed(exc)
            finally:
                self._queue.task_done()

    def _failed(self, exc: BaseException) -> None:
        log.error("simulated job controller failed", exc_info=exc)
        self.errors.append(exc)

    def _managed(self, job: JSON) -> bool:
        return not self._skip.matches((job.get("metadata") or {}).get("labels") or {})

    def _create_pods(self, job: JSON) -> None:
        meta = job["metadata"]
        for _ in range(int((job.get("spec") or {}).get("parallelism", 1))):
            self.store.add_job_pod(meta["namespace"], meta["name"], phase="Pending")

    def _pod_ended(self, pod: JSON) -> None:
        namespace = str(pod["metadata"]["namespace"])
        name = _owning_job(pod)
        assert name is not None
        job = self.store.get(JOBS, name, namespace)
        status = dict(job.get("status") or {})
        if not self._managed(job) or any(
            c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
            for c in status.get("conditions") or []
        ):
            return
        spec = job.get("spec") or {}
        status["active"] = max(int(status.get("active", 0)) - 1, 0)
        if (pod.get("status") or {}).get("phase") == "Succeeded":
            self._succeeded(namespace, name, spec, status)
            return
        action = pod_failure_action(spec.get("podFailurePolicy"), pod)
        failed = int(status.get("failed", 0))
        if action == "Ignore":
            self.store.set_job_status(namespace, name, status)
            self.store.add_job_pod(namespace, name, phase="Pending")
            return
        failed += 1
        limit = int(spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT))
        if action == "FailJob" or failed > limit:
            reason = "PodFailurePolicy" if action == "FailJob" else "BackoffLimitExceeded"
            message = (
                f"Pod {namespace}/{pod['metadata']['name']} matched a FailJob rule"
                if action == "FailJob"
                else "Job has reached the specified backoff limit"
            )
            self.store.finish_job(
                namespace, name, succeeded=False, reason=reason, message=message, failed_pods=failed
            )
            return
        self.store.set_job_status(namespace, name, {**status, "failed": failed})
        self.store.add_job_pod(namespace, name, phase="Pending")

    def _succeeded(self, namespace: str, name: str, spec: JSON, status: JSON) -> None:
        done = int(status.get("succeeded", 0)) + 1
        if done >= int(spec.get("completions", 1)):
            self.store.finish_job(namespace, name, succeeded=True)
            return
        self.store.set_job_status(namespace, name, {**status, "succeeded": done})
