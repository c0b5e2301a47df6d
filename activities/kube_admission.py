"""Kubernetes side of node admission: hold, read the agent's EFA verdict, NCCL, admit.

A node is held behind its startup taint, the node agent's EFA verdict is read,
the optional NCCL all-reduce Job runs on it (``activities.admission_nccl``),
and the node is admitted (the taint removed) for one boot.

Every write is a read-modify-write with the Node's resourceVersion (a 409
re-reads), and every activity checks the node's boot id first: a node that
rebooted meanwhile is never untainted on the strength of an older boot's
burn-in, and a retry after a write finds it done.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.admission_nccl import NcclJobs
from activities.kubernetes import CONFLICT_RETRIES, api_error, call_api, node_ready
from activities.world_time import REAL_TIME, WorldTime
from gpu_remediation import admission_models as a
from gpu_remediation.ids import ADMITTED_BOOT_ANNOTATION, Activities
from gpu_remediation.models import ConditionEvidence, Evidence
from gpu_remediation.npd_message import parse_condition_message
from gpu_remediation.settings import Settings

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
ZONE_LABEL = "topology.kubernetes.io/zone"


class KubeAdmissionActivities:
    """Admission's activities on Nodes (client injected)."""

    def __init__(
        self,
        core_v1: Any,
        settings: Settings,
        batch_v1: Any = None,
        *,
        world: WorldTime = REAL_TIME,
    ) -> None:
        """Bind to the API client.

        Args:
            core_v1: ``kubernetes.client.CoreV1Api``.
            settings: The node-pool label; the NCCL Job's namespace and GPU resource.
            world: The timeline the NCCL check's polls run on (``activities.world_time``).
            batch_v1: ``kubernetes.client.BatchV1Api`` for the NCCL check's Job
                (default: one on ``core_v1``'s API client).
        """
        self._core = core_v1
        self._settings = settings
        batch = batch_v1 if batch_v1 is not None else k8s.BatchV1Api(core_v1.api_client)
        self._nccl = NcclJobs(batch, core_v1, settings, world)

    def all(self) -> list[Callable[..., Any]]:
        """Every activity of this class, for a worker's registration."""
        return [self.hold_for_admission, self.check_efa, self.run_nccl_check, self.admit_node]

    @activity.defn(name=Activities.HOLD_FOR_ADMISSION)
    async def hold_for_admission(self, input: a.HoldForAdmissionInput) -> a.AdmissionHold:
        """Read the node for its admission; with ``add_taint``, put the startup taint on.

        The taint is added only while the node still runs ``boot_id`` and that
        boot has not been admitted (a retry finds it present and adds nothing).
        """
        added = {"taint": False}

        def change(node: Any) -> dict[str, Any] | None:
            taints = _taints(node)
            boot = input.boot_id or _boot_id(node)
            if (
                not boot
                or _boot_id(node) != boot
                or _annotation(node, ADMITTED_BOOT_ANNOTATION) == boot
                or any(t["key"] == input.taint_key for t in taints)
            ):
                return None
            added["taint"] = True
            taint = {"key": input.taint_key, "effect": "NoSchedule"}
            if input.taint_value:
                taint["value"] = input.taint_value
            return {"spec": {"taints": [*taints, taint]}}

        if input.add_taint:
            await self._update_node(input.node, change)
        node = await call_api(self._core.read_node, input.node, missing_ok=True)
        if node is None:
            return a.AdmissionHold(exists=False)
        labels = node.metadata.labels or {}
        return a.AdmissionHold(
            exists=True,
            boot_id=_boot_id(node),
            ready=node_ready(node),
            ready_since=_ready_since(node),
            tainted=any(t["key"] == input.taint_key for t in _taints(node)),
            taint_added=added["taint"],
            admitted_boot=_annotation(node, ADMITTED_BOOT_ANNOTATION),
            provider_id=(node.spec.provider_id if node.spec else None) or "",
            node_pool=labels.get(self._settings.node_pool_label),
            instance_type=labels.get(INSTANCE_TYPE_LABEL),
            zone=labels.get(ZONE_LABEL),
        )

    @activity.defn(name=Activities.CHECK_EFA)
    async def check_efa(self, input: a.CheckEfaInput) -> a.CheckEfaResult:
        """Read the node agent's EFA verdict for the node (``input.conditions``, all healthy).

        The agent checks device count, provider and link (``EfaHealthProblem``)
        and the ports' rate and error counters (``EfaDegraded``) every 30 s; a
        problem's findings come back as evidence.
        """
        node = await call_api(self._core.read_node, input.node, missing_ok=True)
        if node is None:
            raise ApplicationError(f"node {input.node} is gone", type="NodeNotFound")
        conditions = (node.status.conditions or []) if node.status else []
        by_type = {c.type: c for c in conditions}
        missing = [t for t in input.conditions if t not in by_type]
        if missing:
            return a.CheckEfaResult(
                passed=False,
                reported=False,
                summary=f"the node agent has not reported {', '.join(missing)} yet",
            )
        now = datetime.now(UTC)
        problems = [by_type[t] for t in input.conditions if by_type[t].status == "True"]
        if not problems:
            return a.CheckEfaResult(passed=True, reported=True, summary="EFA healthy")
        evidence: list[Evidence] = []
        for condition in problems:
            message = (condition.message or "")[:4096]
            found = list(parse_condition_message(message, observed_at=now, source="node-admission"))
            evidence += found or [
                ConditionEvidence(
                    observed_at=now,
                    source="node-admission",
                    type=condition.type,
                    status="True",
                    reason=(condition.reason or "")[:1024],
                    message=message,
                )
            ]
        summary = "; ".join(f"{c.type}: {c.message or c.reason or ''}" for c in problems)
        return a.CheckEfaResult(
            passed=False, reported=True, summary=summary[:2048], evidence=evidence[:256]
        )

    @activity.defn(name=Activities.RUN_NCCL_CHECK)
    async def run_nccl_check(self, input: a.RunNcclCheckInput) -> a.NcclCheckResult:
        """Run NCCL's all-reduce over the node's GPUs in a Job pinned to the node.

        See ``activities.admission_nccl``: a wrong result or a bus bandwidth under
        the floor fails the check, with the verdict as evidence.
        """
        return await self._nccl.run(input)

    @activity.defn(name=Activities.ADMIT_NODE)
    async def admit_node(self, input: a.AdmitNodeInput) -> a.AdmitNodeResult:
        """Remove the startup taint and note the admitted boot, if the node still runs it."""
        if not input.boot_id:
            raise ApplicationError("admit_node needs a boot id", type="InvalidInput")
        seen: dict[str, Any] = {}

        def change(node: Any) -> dict[str, Any] | None:
            seen["boot"] = _boot_id(node)
            taints = _taints(node)
            kept = [t for t in taints if t["key"] != input.taint_key]
            seen["removed"] = len(kept) != len(taints)
            if seen["boot"] != input.boot_id:
                return None
            noted = _annotation(node, ADMITTED_BOOT_ANNOTATION) == input.boot_id
            if noted and not seen["removed"]:
                return None
            patch: dict[str, Any] = {
                "metadata": {"annotations": {ADMITTED_BOOT_ANNOTATION: input.boot_id}}
            }
            if seen["removed"]:
                patch["spec"] = {"taints": kept}
            return patch

        exists = await self._update_node(input.node, change)
        if not exists:
            return a.AdmitNodeResult(status="node_gone")
        if seen["boot"] != input.boot_id:
            return a.AdmitNodeResult(status="boot_changed", boot_id_now=seen["boot"])
        return a.AdmitNodeResult(
            status="admitted" if seen["removed"] else "already_admitted",
            taint_removed=seen["removed"],
            boot_id_now=seen["boot"],
        )

    async def _update_node(self, name: str, change: Callable[[Any], dict[str, Any] | None]) -> bool:
        """Read, change, write with resourceVersion; False when the node is gone."""
        for _ in range(CONFLICT_RETRIES):
            node = await call_api(self._core.read_node, name, missing_ok=True)
            if node is None:
                return False
            patch = change(node)
            if patch is None:
                return True
            patch.setdefault("metadata", {})["resourceVersion"] = node.metadata.resource_version
            try:
                await asyncio.to_thread(self._core.patch_node, name, patch)
                return True
            except ApiException as err:
                if err.status == 404:
                    return False
                if err.status != 409:
                    raise api_error(f"patch node {name}", err) from err
                activity.logger.info("node %s changed underneath, retrying", name)
        raise ApplicationError(f"node {name} kept changing; gave up after {CONFLICT_RETRIES} tries")


def _boot_id(node: Any) -> str:
    status = node.status
    return str(status.node_info.boot_id) if status and status.node_info else ""


def _taints(node: Any) -> list[dict[str, Any]]:
    out = []
    for taint in (node.spec.taints or []) if node.spec else []:
        item: dict[str, Any] = {"key": taint.key, "effect": taint.effect}
        if taint.value is not None:
            item["value"] = taint.value
        if taint.time_added is not None:
            item["timeAdded"] = taint.time_added.isoformat()
        out.append(item)
    return out


def _annotation(node: Any, key: str) -> str | None:
    value = (node.metadata.annotations or {}).get(key) if node.metadata else None
    return str(value) if value is not None else None


def _ready_since(node: Any) -> datetime | None:
    for cond in (node.status.conditions or []) if node.status else []:
        if cond.type == "Ready" and cond.status == "True":
            return cond.last_transition_time  # type: ignore[no-any-return]
    return None
