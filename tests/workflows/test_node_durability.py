"""Crash safety: retried reboots, worker restarts, and the replacement cap across nodes."""

import asyncio

from temporalio.testing import WorkflowEnvironment

from gpu_remediation.ids import Activities as A
from gpu_remediation.ids import Updates
from gpu_remediation.models import Outcome, Rung
from gpu_remediation.policy import ReplacementPolicy
from gpu_remediation.workflow_models import AbortInput, ApproveInput, NodeRemediationState
from tests.conftest import assert_eventually
from tests.doubles import FakeFleet
from tests.workflows.node_support import cluster, policy, with_rung, xid


async def test_reboot_is_not_repeated_when_retried_after_it_happened(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(crash_after_reboot=True)
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-40", xid(79))
        result = await handle.result()
    assert result.outcome == Outcome.REPAIRED
    assert fleet.called(A.REBOOT_NODE) == 2  # the activity ran twice...
    assert fleet.reboots == 1  # ...but the host rebooted once
    boot_ids = {arg.boot_id_before for name, arg in fleet.calls if name == A.REBOOT_NODE}  # type: ignore[attr-defined]
    assert boot_ids == {"boot-0"}


async def test_incident_survives_a_worker_restart(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    # On the dev server: the time-skipping server keeps routing tasks to the
    # dead worker's sticky queue, which a real server times out.
    fleet = FakeFleet()
    pol = with_rung(policy(), Rung.REBOOT, requires_approval=True)
    async with cluster(dev_env, task_queue, fleet) as c:
        handle = await c.report("gpu-41", xid(79), pol=pol)
        await assert_eventually(
            lambda: c.state(handle), lambda s: s.waiting_for == "approval of reboot"
        )
    # The first worker is gone; a new one picks the incident up from history.
    async with cluster(dev_env, task_queue, fleet):
        await handle.execute_update(
            Updates.APPROVE, ApproveInput(rung=Rung.REBOOT), result_type=NodeRemediationState
        )
        result = await handle.result()
    assert result.outcome == Outcome.REPAIRED
    assert fleet.called(A.QUARANTINE_NODE) == 1
    assert fleet.reboots == 1


async def test_a_burst_of_replacements_never_exceeds_the_cap(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    # On the dev server: time skipping would jump to the permit-wait timeout
    # whenever no activity happens to be running.
    fleet = FakeFleet(replace_seconds=0.3, pool_total=100)
    pol = policy(replacement=ReplacementPolicy(max_concurrent=2))
    async with cluster(dev_env, task_queue, fleet) as c:
        handles = await asyncio.gather(
            *(c.report(f"gpu-5{i}", xid(79), pol=pol, prior_incidents=5) for i in range(8))
        )
        results = await asyncio.gather(*(h.result() for h in handles))
    assert [r.outcome for r in results] == [Outcome.REPLACED] * 8
    assert fleet.called(A.DELETE_NODE_CLAIM) == 8
    assert fleet.max_replacing == 2


async def test_abort_while_waiting_for_a_permit_withdraws_and_cleans_up(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    gate = asyncio.Event()
    fleet = FakeFleet(replace_gate=gate, pool_total=100)
    pol = policy(replacement=ReplacementPolicy(max_concurrent=1))
    async with cluster(dev_env, task_queue, fleet) as c:
        holder, waiter = await c.holder_and_waiter("gpu-80", "gpu-81", pol)
        await waiter.execute_update(
            Updates.ABORT, AbortInput(reason="changed my mind"), result_type=NodeRemediationState
        )
        aborted = await waiter.result()
        gate.set()  # only now may the first node's replacement finish
        replaced = await holder.result()
    assert aborted.outcome == Outcome.ABORTED
    assert replaced.outcome == Outcome.REPLACED
    deleted = [arg.node for name, arg in fleet.calls if name == A.DELETE_NODE_CLAIM]  # type: ignore[attr-defined]
    assert deleted == ["gpu-80"]
    released = [arg.node for name, arg in fleet.calls if name == A.RELEASE_NODE]  # type: ignore[attr-defined]
    assert released == ["gpu-81"]
