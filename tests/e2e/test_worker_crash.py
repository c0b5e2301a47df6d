"""End to end: the worker dies in the middle of a reboot; a new one finishes the incident."""

from __future__ import annotations

from temporalio.api.enums.v1 import EventType

from gpu_remediation.ids import Activities
from simulator.fleet import Durations, PoolSpec
from simulator.fleet.model import Phase
from tests.conftest import assert_eventually
from tests.e2e.conftest import MakeStack, attempts, fleet_call, settled_incidents


async def test_killing_the_worker_mid_reboot_and_starting_another_reboots_exactly_once(
    make_stack: MakeStack,
) -> None:
    # The reboot lasts 3 s real (6 simulated minutes at 120x). The dead worker's
    # attempt is retried once its heartbeat timeout (10 s real, the liveness
    # floor) passes, by the new worker; the reboot's window (60 min simulated,
    # 30 s real, a workflow timer over all attempts) holds the whole recovery.
    # A short verification diagnostic (1 min) keeps the test fast.
    stack = await make_stack(
        [PoolSpec(name="h100", nodes=5)],
        time_factor=120,
        durations=Durations(reboot="6m", diag_level_2="1m"),
        policy="rungs: {reboot: {timeout: 60m, retry: {initial_interval: 30s}}}",
    )
    fleet = stack.fleet
    boot_before = fleet.boot_id("h100-0004")
    fleet.inject("fallen_off_bus", "h100-0004", gpu=0)

    await assert_eventually(
        lambda: fleet_call(lambda: fleet.node("h100-0004").phase),
        lambda phase: phase == Phase.REBOOTING,
        timeout=30,
        interval=0.02,
        message="the node is rebooting",
    )
    stack.worker.kill()
    assert fleet.node("h100-0004").phase == Phase.REBOOTING  # killed mid-reboot
    await stack.restart_worker()

    (incident,) = await settled_incidents(stack, 1, timeout=60)

    assert incident.result == "repaired"
    assert attempts(incident)[-1] == "reboot"
    counters = fleet.snapshot().counters
    assert counters["reboots"] == 1  # EC2 was asked exactly once
    assert "reboots.ignored" not in counters
    assert fleet.boot_id("h100-0004") != boot_before
    # The reboot activity really was cut off and run again by the second worker.
    history = await stack.client.get_workflow_handle(
        incident.workflow_id, run_id=incident.run_id
    ).fetch_history()
    scheduled = {
        event.event_id
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and event.activity_task_scheduled_event_attributes.activity_type.name
        == Activities.REBOOT_NODE
    }
    (started,) = [
        event.activity_task_started_event_attributes
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and event.activity_task_started_event_attributes.scheduled_event_id in scheduled
    ]
    assert started.attempt >= 2
    assert stack.worker.starts == 2
