"""Each baseline policy does what its name says, through the real node workflow."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from gpu_remediation.ids import Activities as A
from gpu_remediation.models import Outcome, Rung
from gpu_remediation.policy_loader import load_policy
from policies import BASELINES, BUILT_IN, baseline_text, load_baseline
from tests.conftest import assert_eventually
from tests.doubles import FakeFleet
from tests.workflows.node_support import cluster, xid

TOUCHING = (
    A.QUARANTINE_NODE,
    A.DRAIN_GPU_PODS,
    A.RESET_GPUS,
    A.REBOOT_NODE,
    A.RUN_DIAGNOSTIC,
    A.DELETE_NODE_CLAIM,
)
"""Activities that change or occupy the node (escalation and notes only label and tell)."""


def test_every_file_in_the_folder_is_a_named_baseline_and_loads() -> None:
    folder = Path(__file__).parents[2] / "policies"
    assert sorted(p.stem for p in folder.glob("*.yaml")) == sorted(BUILT_IN)
    for name in BUILT_IN:
        load_baseline(name)
        header = baseline_text(name).splitlines()[0]
        assert header.startswith(f'# Baseline "{name}"')


def test_graded_is_the_shipped_default_plus_the_hand_over_rule_and_the_admission_gate() -> None:
    graded = load_baseline("graded")
    default = load_policy()
    assert graded.escalation.close_on_recovery
    assert graded.admission.enabled
    assert not default.admission.enabled
    shipped = {"escalation": default.escalation, "admission": default.admission, "pools": {}}
    assert graded.model_copy(update=shipped) == default


def test_graded_skips_the_gpu_reset_on_p5_where_ec2_refuses_it() -> None:
    for name in ("graded", "graded-no-admission"):
        policy = load_baseline(name)
        assert set(policy.pools) == {"p5"}, name
        assert not policy.for_pool("p5").rung(Rung.GPU_RESET).enabled, name
        assert policy.for_pool("h100").rung(Rung.GPU_RESET).enabled, name
        assert policy.for_pool("p5").model_copy(update={"rungs": policy.rungs}) == policy


def test_only_graded_coordinates_with_jobs_the_others_ask_no_job_to_checkpoint() -> None:
    assert load_baseline("graded").jobs.enabled  # the shipped handshake, urgency per class
    for name in ("no-automation", "replace-always", "reboot-then-replace"):
        assert not load_baseline(name).jobs.enabled, name


def test_karpenter_and_eks_tolerations_are_their_documented_ones() -> None:
    for name in ("replace-always", "reboot-then-replace"):
        rules = {r.type: r.grace for r in load_baseline(name).triggers.conditions}
        assert rules["Ready"] == timedelta(minutes=30)
        assert rules["AcceleratedHardwareReady"] == timedelta(minutes=10)
        assert rules["GpuHealthProblem"] == timedelta(minutes=10)
        assert rules["EfaHealthProblem"] == timedelta(minutes=30)


async def test_replace_always_replaces_a_resettable_fault_without_reset_reboot_or_diagnostic(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with cluster(time_skipping_env, task_queue) as c:
        pol = load_baseline("replace-always")
        results = [
            await (await c.report(f"gpu-r{code}", xid(code), pol=pol)).result()
            for code in (48, 79, 119)
        ]
    assert [r.outcome for r in results] == [Outcome.REPLACED] * 3
    assert all(r.rungs_tried == [Rung.REPLACE] for r in results)
    for never in (A.RESET_GPUS, A.REBOOT_NODE, A.RUN_DIAGNOSTIC, A.DRAIN_GPU_PODS):
        assert c.fleet.called(never) == 0, never
    assert c.fleet.called(A.DELETE_NODE_CLAIM) == 3


async def test_reboot_then_replace_reboots_a_gpu_fault_unverified_and_never_resets(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    pol = load_baseline("reboot-then-replace").model_copy(update={"cooldown": timedelta(0)})
    async with cluster(time_skipping_env, task_queue) as c:
        result = await (await c.report("gpu-e1", xid(48, gpu=2), pol=pol)).result()
    assert result.outcome == Outcome.REPAIRED
    assert result.rungs_tried == [Rung.REBOOT]
    assert c.fleet.called(A.RESET_GPUS) == 0
    assert c.fleet.called(A.RUN_DIAGNOSTIC) == 0


async def test_reboot_then_replace_replaces_when_the_fault_is_back_after_the_reboot(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    pol = load_baseline("reboot-then-replace")
    async with cluster(time_skipping_env, task_queue) as c:
        handle = await c.report("gpu-e2", xid(79, gpu=1), pol=pol)
        await assert_eventually(lambda: c.state(handle), lambda s: s.stage == "cooldown")
        await c.signal(handle, "gpu-e2", xid(79, gpu=1))
        result = await handle.result()
    assert result.outcome == Outcome.REPLACED
    assert result.rungs_tried == [Rung.REBOOT, Rung.REPLACE]
    assert c.fleet.called(A.REBOOT_NODE) == 1
    assert c.fleet.called(A.RESET_GPUS) == 0


async def test_reboot_then_replace_replaces_hardware_faults_at_once(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with cluster(time_skipping_env, task_queue) as c:
        pol = load_baseline("reboot-then-replace")
        result = await (await c.report("gpu-e3", xid(54), pol=pol)).result()
    assert result.outcome == Outcome.REPLACED
    assert c.fleet.called(A.REBOOT_NODE) == 0


async def test_no_automation_only_hands_the_node_over_and_closes_when_a_person_fixed_it(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    pol = load_baseline("no-automation")
    async with cluster(time_skipping_env, task_queue) as c:
        handle = await c.report("gpu-n1", xid(79, gpu=4), pol=pol)
        await assert_eventually(
            lambda: c.state(handle), lambda s: s.waiting_for == "an operator: retry, skip or abort"
        )
        assert c.fleet.called(A.ESCALATE) == 1
        assert not any(c.fleet.called(name) for name in TOUCHING)
        # The person repairs the node; the agent reports the GPU healthy again.
        await c.signal(handle, "gpu-n1", xid(79, gpu=4).model_copy(update={"cleared": True}))
        result = await handle.result()
    assert result.outcome == Outcome.RECOVERED
    assert not any(c.fleet.called(name) for name in TOUCHING)


async def test_without_close_on_recovery_a_cleared_signal_does_not_end_the_hand_over(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    base = load_baseline("no-automation")
    pol = base.model_copy(
        update={"escalation": base.escalation.model_copy(update={"close_on_recovery": False})}
    )
    async with cluster(time_skipping_env, task_queue, FakeFleet()) as c:
        handle = await c.report("gpu-n2", xid(79), pol=pol)
        await assert_eventually(
            lambda: c.state(handle), lambda s: s.waiting_for == "an operator: retry, skip or abort"
        )
        await c.signal(handle, "gpu-n2", xid(79).model_copy(update={"cleared": True}))
        result = await handle.result()  # the escalation hold runs out (time skipping)
    assert result.outcome == Outcome.ESCALATED


def test_a_comparison_runs_the_four_baselines_by_default_and_variants_only_when_named() -> None:
    assert BASELINES == ("no-automation", "replace-always", "reboot-then-replace", "graded")
    assert "graded-no-admission" in BUILT_IN
    assert "graded-no-admission" not in BASELINES
