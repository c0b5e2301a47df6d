"""Cooldown of a policy that does not verify: the fault reported again during the step counts."""

from datetime import timedelta

from temporalio.testing import WorkflowEnvironment

from gpu_remediation.ids import Activities as A
from gpu_remediation.models import Outcome, Rung
from gpu_remediation.policy import RetrySpec
from policies import load_baseline
from tests.conftest import assert_eventually
from tests.doubles import FakeFleet
from tests.workflows.node_support import cluster, with_rung, xid


async def test_a_fault_reported_again_while_an_unverified_reboot_ran_climbs_to_replacement(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    # The watcher's report of the fault on the new boot can arrive before the
    # cooldown has begun (the reboot's activity is still finishing): it must not
    # be taken as part of the fault that the reboot "fixed".
    pol = load_baseline("reboot-then-replace").model_copy(
        update={"cooldown": timedelta(seconds=30)}
    )
    pol = with_rung(pol, Rung.REBOOT, retry=RetrySpec(initial_interval=timedelta(seconds=2)))
    # The reboot happens, then its activity fails once and is retried 2s later:
    # the report lands while the step is still running.
    fleet = FakeFleet(crash_after_reboot=True)
    async with cluster(dev_env, task_queue, fleet) as c:
        handle = await c.report("gpu-cu", xid(48), pol=pol)
        await assert_eventually(lambda: _reboots(fleet), lambda n: n == 1, timeout=15)
        await c.signal(handle, "gpu-cu", xid(48))
        result = await handle.result()
    assert result.outcome == Outcome.REPLACED
    assert fleet.called(A.DELETE_NODE_CLAIM) == 1
    assert fleet.reboots == 1


async def _reboots(fleet: FakeFleet) -> int:
    return fleet.reboots
