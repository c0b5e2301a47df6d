"""The watcher's admission hook: a node behind the startup taint gets its burn-in started.

A Node carrying the startup taint (``ids.STARTUP_TAINT_KEY``) whose current
boot has not been admitted (annotation ``ids.ADMITTED_BOOT_ANNOTATION``) needs
an admission for that boot, unless an incident put the taint on
(``ids.INCIDENT_HOLD_TAINT_VALUE``): it starts that admission itself. The
watcher sees it on its listing and on every change; the start is idempotent
(``gpu_remediation.admission_start``), and each (node, boot) is started once
per watcher. While Temporal is unavailable the starts wait and are retried; a
start Temporal refuses for good is logged and dropped.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from gpu_remediation.admission_models import AdmissionInput
from gpu_remediation.admission_start import start_admission
from gpu_remediation.ids import (
    ADMITTED_BOOT_ANNOTATION,
    INCIDENT_HOLD_TAINT_VALUE,
    STARTUP_TAINT_KEY,
    is_valid_node_name,
)
from gpu_remediation.policy import Policy

log = logging.getLogger("gpu_remediation.watcher.admission")

_UNAVAILABLE = frozenset(
    {RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.RESOURCE_EXHAUSTED}
)
MAX_REMEMBERED = 10_000


@dataclass(frozen=True)
class GatedNode:
    """A node behind the startup taint whose boot was not admitted."""

    name: str
    boot_id: str
    first_boot: bool


def gated_node(raw: Any) -> GatedNode | None:
    """The node's gated boot if it needs an admission, else None (also for odd objects)."""
    if not isinstance(raw, dict):
        return None
    metadata, spec = raw.get("metadata") or {}, raw.get("spec") or {}
    name = metadata.get("name")
    taints = spec.get("taints") or []
    if not isinstance(name, str) or not is_valid_node_name(name):
        return None
    startup = [t for t in taints if isinstance(t, dict) and t.get("key") == STARTUP_TAINT_KEY]
    if not startup or any(t.get("value") == INCIDENT_HOLD_TAINT_VALUE for t in startup):
        return None  # not gated, or gated by an incident that starts the admission itself
    boot = ((raw.get("status") or {}).get("nodeInfo") or {}).get("bootID")
    if not isinstance(boot, str) or not boot:
        return None  # not registered fully yet: the next change carries it
    admitted = (metadata.get("annotations") or {}).get(ADMITTED_BOOT_ANNOTATION)
    if admitted == boot:
        return None
    return GatedNode(name=name, boot_id=boot, first_boot=admitted is None)


class AdmissionStarts:
    """Starts the admissions of gated nodes the watcher sees.

    Args:
        client: Temporal client (pydantic data converter).
        cluster: Cluster name (part of the admission ids).
        policy: The policy admissions run under.
        task_queue: The remediation workers' task queue.
        semaphore_workflow_id: The replacement semaphore incidents share.
    """

    def __init__(
        self,
        client: Client,
        *,
        cluster: str,
        policy: Policy,
        task_queue: str,
        semaphore_workflow_id: str,
        backoff_max: float = 30.0,
    ) -> None:
        self._client = client
        self._cluster = cluster
        self._policy = policy
        self._task_queue = task_queue
        self._semaphore = semaphore_workflow_id
        self._backoff_max = backoff_max
        self._pending: deque[GatedNode] = deque()
        self._seen: dict[tuple[str, str], None] = {}
        self._retry_at = 0.0
        self._failures = 0
        self.started: list[str] = []
        """Admission workflow ids started (bounded; for tests and status)."""

    @property
    def pending(self) -> int:
        """Admission starts waiting to be sent (or sent again)."""
        return len(self._pending)

    def saw(self, raw: Any) -> None:
        """Look at a listed or changed Node object."""
        gated = gated_node(raw)
        if gated is None or (gated.name, gated.boot_id) in self._seen:
            return
        self._seen[(gated.name, gated.boot_id)] = None
        while len(self._seen) > MAX_REMEMBERED:
            del self._seen[next(iter(self._seen))]
        self._pending.append(gated)

    async def flush(self) -> None:
        """Start what is pending, in order; on unavailability keep the rest for later."""
        if not self._pending or time.monotonic() < self._retry_at:
            return
        while self._pending:
            gated = self._pending[0]
            try:
                workflow_id = await start_admission(
                    self._client,
                    AdmissionInput(
                        cluster=self._cluster,
                        node=gated.name,
                        boot_id=gated.boot_id,
                        policy=self._policy,
                        trigger="new_node",
                        first_boot=gated.first_boot,
                        semaphore_workflow_id=self._semaphore,
                    ),
                    self._task_queue,
                )
            except RPCError as err:
                if err.status in _UNAVAILABLE:
                    self._failures += 1
                    delay = min(0.5 * 2 ** (self._failures - 1), self._backoff_max)
                    self._retry_at = time.monotonic() + delay
                    log.warning("admission starts wait (%s); retrying in %.1fs", err, delay)
                    return
                log.error("%s: admission start refused and dropped: %s", gated.name, err)
            except ValueError as err:
                log.error("%s: admission not started: %s", gated.name, err)
            else:
                log.info("%s: admission of boot %s started", gated.name, gated.boot_id)
                self.started.append(workflow_id)
                del self.started[:-1000]
            self._pending.popleft()
            self._failures = 0
