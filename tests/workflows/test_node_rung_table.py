"""A rung with an activity of its own needs no workflow code: the table entry runs it."""

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from temporalio import activity
from temporalio.testing import WorkflowEnvironment

from gpu_remediation import contracts as c
from gpu_remediation import rungs
from gpu_remediation.ids import Activities
from gpu_remediation.ids import Activities as A
from gpu_remediation.models import Outcome, Rung
from gpu_remediation.rungs import Component, RungAction, RungSpec, Verification
from tests.doubles import FakeFleet
from tests.workflows.node_support import cluster, xid

STEP = Activities.rung_step(Rung.GPU_RESET)


@dataclass
class DriverRestartFleet(FakeFleet):
    """A fleet that also serves the table-named step's activity."""

    restart_ok: bool = True

    def activities(self) -> list[object]:
        @activity.defn(name=STEP)
        async def restart_gpu_driver(input: c.RunRungStepInput) -> c.RungStepResult:
            self._log(STEP, input)
            return c.RungStepResult(ok=self.restart_ok, detail=f"{input.rung} on {input.node}")

        return [*super().activities(), restart_gpu_driver]


@pytest.fixture
def gpu_reset_runs_its_own_activity() -> Iterator[None]:
    """The GPU reset rung's entry made one with an activity of its own (a new rung's shape)."""
    original = rungs.RUNG_TABLE[Rung.GPU_RESET]
    rungs.RUNG_TABLE[Rung.GPU_RESET] = RungSpec(
        action=RungAction.ACTIVITY,
        verification=Verification.COMPONENT,
        fixes=frozenset({Component.GPU}),
        released_as=Outcome.REPAIRED,
        disruptive=False,
    )
    try:
        yield
    finally:
        rungs.RUNG_TABLE[Rung.GPU_RESET] = original


@pytest.mark.usefixtures("gpu_reset_runs_its_own_activity")
async def test_a_rung_runs_its_own_activity_then_verifies(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = DriverRestartFleet()
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-t1", xid(48, gpu=1))
        result = await handle.result()
    assert result.outcome == Outcome.REPAIRED
    assert fleet.called(STEP) == 1
    assert fleet.called(A.RESET_GPUS) == 0
    names = fleet.names()
    assert names.index(STEP) < names.index(A.RUN_DIAGNOSTIC)


@pytest.mark.usefixtures("gpu_reset_runs_its_own_activity")
async def test_a_rung_whose_activity_fails_climbs(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = DriverRestartFleet(restart_ok=False)
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-t2", xid(48, gpu=1))
        result = await handle.result()
    assert fleet.called(STEP) == 1
    assert result.rungs_tried == [Rung.STOP_GPU_WORK, Rung.GPU_RESET, Rung.REBOOT]
    assert result.outcome == Outcome.REPAIRED
