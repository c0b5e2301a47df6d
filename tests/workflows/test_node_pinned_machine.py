"""Issue 35: an incident acts only on the machine it pinned at triage.

A node name can come back as another machine. Every call carries the pin (the
Node's uid and provider id read at triage); when an activity refuses the node
as another machine, or a read shows one, the incident closes as ``node_gone``
and does nothing more under that name.
"""

from temporalio.testing import WorkflowEnvironment

from gpu_remediation import contracts as c
from gpu_remediation.ids import Activities as A
from gpu_remediation.models import Outcome
from tests.doubles import SIDE_EFFECTS, FakeFleet
from tests.workflows.node_support import cluster, policy, xid


async def test_every_mutating_call_carries_the_machine_triage_pinned(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet()
    async with cluster(time_skipping_env, task_queue, fleet) as c_:
        handle = await c_.report("gpu-p1", xid(79), pol=policy())
        result = await handle.result()
    assert result.outcome == Outcome.REPAIRED
    triage = fleet.calls[0][1]
    assert isinstance(triage, c.ReadNodeHealthInput)
    assert triage.pin is None
    pins = {getattr(arg, "pin", None) for name, arg in fleet.calls if name in SIDE_EFFECTS}
    (pin,) = pins
    assert pin is not None
    assert pin.uid == "uid-node-0"
    (reboot,) = [arg for name, arg in fleet.calls if name == A.REBOOT_NODE]
    assert isinstance(reboot, c.RebootNodeInput)
    assert reboot.provider_id == pin.provider_id  # the pinned instance, never a re-read one


async def test_a_step_refused_as_another_machine_closes_the_incident_as_node_gone(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    # Xid 48 starts at a GPU reset; by then the name is a new instance.
    fleet = FakeFleet(replaced_at=A.RESET_GPUS)
    async with cluster(time_skipping_env, task_queue, fleet) as c_:
        handle = await c_.report("gpu-p2", xid(48), pol=policy())
        result = await handle.result()
        state = await c_.state(handle)
    assert result.outcome == Outcome.NODE_GONE
    assert any(d.action == "closed: the machine is gone" for d in state.decisions)
    # Nothing after the refused call touched the name: no reboot, release or hand-over.
    assert fleet.called(A.REBOOT_NODE) == 0
    assert fleet.called(A.RELEASE_NODE) == 0
    assert fleet.called(A.ESCALATE) == 0


async def test_a_reboot_is_not_asked_for_when_its_read_shows_another_machine(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(replaced_after_reads=1)  # triage reads the old machine, the reboot a new one
    async with cluster(time_skipping_env, task_queue, fleet) as c_:
        handle = await c_.report("gpu-p3", xid(79), pol=policy())
        result = await handle.result()
    assert result.outcome == Outcome.NODE_GONE
    assert fleet.called(A.REBOOT_NODE) == 0
    assert fleet.reboots == 0
