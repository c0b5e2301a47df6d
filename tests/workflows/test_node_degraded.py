"""Issue 37: a slow GPU is reset when idle and verified by the diagnostic that measures speed."""

from temporalio.testing import WorkflowEnvironment

from gpu_remediation.ids import Activities as A
from gpu_remediation.models import FaultClass, Outcome, Rung
from tests.doubles import FakeFleet
from tests.workflows.node_support import cluster, condition, policy

SLOW = "Degraded on GPU 2 (0000:53:00) [pcie_width]: x8, expected x16 (2+ cycles)"


async def test_a_slow_gpu_is_reset_and_verified_at_diag_level_3(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet()
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        slow = condition("GpuDegraded", "True", reason="GpuDegradationDetected")
        handle = await c.report("gpu-slow1", slow.model_copy(update={"message": SLOW}))
        result = await handle.result()
    assert (result.fault_class, result.outcome) == (FaultClass.GPU_DEGRADED, Outcome.REPAIRED)
    assert result.rungs_tried[-1] == Rung.GPU_RESET
    levels = [arg.level for name, arg in fleet.calls if name == A.RUN_DIAGNOSTIC]  # type: ignore[attr-defined]
    assert levels == [3]
    assert policy().verification.diag_level == 2, "other classes keep the policy's level"
