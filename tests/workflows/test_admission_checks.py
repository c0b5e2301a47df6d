"""The burn-in's checks as the policy names them: the pool's diag level, timeouts, verdicts."""

from __future__ import annotations

from datetime import timedelta

from temporalio.testing import WorkflowEnvironment

from gpu_remediation.admission_models import AdmissionOutcome
from gpu_remediation.classifier import classify
from gpu_remediation.ids import STARTUP_TAINT_KEY
from gpu_remediation.models import ConditionEvidence, FaultClass
from simulator.kube_api import KubeApiServer, KubeStore
from tests.conftest import assert_eventually
from tests.workflows.admission_support import (
    TAINT,
    ScriptedDiag,
    admission_worker,
    gate_policy,
    put_gated_node,
    start,
    taint_keys,
)
from tests.workflows.test_node_admission import _incident_state, _terminate_incident


async def test_a_pool_with_its_own_diag_level_is_burnt_in_at_that_level(
    dev_env: WorkflowEnvironment, kube: KubeApiServer, store: KubeStore, task_queue: str
) -> None:
    put_gated_node(store, "gpu-lvl")  # pool h100
    diag = ScriptedDiag()
    policy = gate_policy(diag_level=2, per_pool_diag_level={"h100": 3, "a100": 1})
    async with admission_worker(dev_env.client, kube, task_queue, diag):
        _, handle = await start(dev_env.client, task_queue, "gpu-lvl", policy=policy)
        result = await handle.result()
    assert result.outcome == AdmissionOutcome.ADMITTED
    assert diag.runs == ["gpu-lvl@3"]


async def test_a_node_never_ready_within_the_timeout_fails_burn_in_without_a_diag(
    dev_env: WorkflowEnvironment, kube: KubeApiServer, store: KubeStore, task_queue: str
) -> None:
    store.put_node("gpu-nr", node_pool="h100", boot_id="boot-a", ready=False, taints=[TAINT])
    diag = ScriptedDiag()
    policy = gate_policy(ready_timeout=timedelta(seconds=1))
    async with admission_worker(dev_env.client, kube, task_queue, diag):
        cluster, handle = await start(dev_env.client, task_queue, "gpu-nr", policy=policy)
        result = await handle.result()
        await _terminate_incident(dev_env.client, cluster, "gpu-nr")
    assert result.outcome == AdmissionOutcome.DEAD_ON_ARRIVAL
    ((name, passed, reason),) = [
        (c.name, c.passed, getattr(c.evidence[0], "reason", "")) for c in result.checks
    ]
    assert (name, passed, reason) == ("ready", False, "BurnInNeverReady")
    assert diag.runs == []
    assert STARTUP_TAINT_KEY in taint_keys(store, "gpu-nr")


async def test_an_efa_verdict_never_reported_reaches_a_later_boots_incident_as_a_problem(
    dev_env: WorkflowEnvironment, kube: KubeApiServer, store: KubeStore, task_queue: str
) -> None:
    # No EfaHealthProblem condition at all: the node agent never reported.
    store.put_node("gpu-mute", node_pool="h100", boot_id="boot-a", taints=[TAINT], conditions=[])
    diag = ScriptedDiag()
    policy = gate_policy(settle=timedelta(0), check_timeout=timedelta(seconds=1))
    async with admission_worker(dev_env.client, kube, task_queue, diag):
        cluster, handle = await start(
            dev_env.client, task_queue, "gpu-mute", policy=policy, first_boot=False
        )
        result = await handle.result()
        state = await assert_eventually(
            lambda: _incident_state(dev_env.client, cluster, "gpu-mute"),
            lambda s: len(s.active_evidence) >= 1,
            message="the incident holds the failed EFA check as a problem in force",
        )
        await _terminate_incident(dev_env.client, cluster, "gpu-mute")
    assert result.outcome == AdmissionOutcome.BURN_IN_FAILED
    assert [(c.name, c.passed) for c in result.checks] == [("dcgm_diag", True), ("efa", False)]
    (evidence,) = state.active_evidence
    assert isinstance(evidence, ConditionEvidence)
    assert (evidence.type, evidence.status) == ("EfaHealthProblem", "True")
    assert classify(state.active_evidence, policy).fault_class is FaultClass.UNKNOWN
