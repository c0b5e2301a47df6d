"""Baseline "graded-no-admission": graded with the admission gate off, by name in compare."""

from __future__ import annotations

from temporalio.testing import WorkflowEnvironment

from gpu_remediation.admission_models import AdmissionOutcome
from gpu_remediation.ids import STARTUP_TAINT_KEY
from policies import load_baseline
from simulator.kube_api import KubeApiServer, KubeStore
from tests.workflows.admission_support import (
    ScriptedDiag,
    admission_worker,
    put_gated_node,
    start,
    taint_keys,
)
from whatif.options import resolve_policies


def test_graded_no_admission_is_graded_with_only_the_admission_gate_off() -> None:
    graded = load_baseline("graded")
    gate_off = load_baseline("graded-no-admission")
    assert not gate_off.admission.enabled
    turned_on = graded.admission.model_copy(update={"enabled": True})
    # Whatever graded's own gate says, the two differ in the gate and nothing else.
    assert gate_off.model_copy(update={"admission": turned_on}) == graded.model_copy(
        update={"admission": turned_on}
    )


def test_compare_resolves_graded_no_admission_as_a_built_in_name() -> None:
    chosen = resolve_policies("graded,graded-no-admission")
    assert [(c.name, c.source) for c in chosen] == [
        ("graded", "policies/graded.yaml"),
        ("graded-no-admission", "policies/graded-no-admission.yaml"),
    ]
    assert not chosen[1].policy.admission.enabled


async def test_under_graded_no_admission_a_gated_node_takes_work_without_burn_in(
    dev_env: WorkflowEnvironment, kube: KubeApiServer, store: KubeStore, task_queue: str
) -> None:
    put_gated_node(store, "gpu-ungated")
    diag = ScriptedDiag()
    async with admission_worker(dev_env.client, kube, task_queue, diag):
        _, handle = await start(
            dev_env.client,
            task_queue,
            "gpu-ungated",
            policy=load_baseline("graded-no-admission"),
        )
        result = await handle.result()
    assert result.outcome == AdmissionOutcome.ADMITTED_UNCHECKED
    assert result.checks == []
    assert diag.runs == []
    assert STARTUP_TAINT_KEY not in taint_keys(store, "gpu-ungated")
