"""End to end: replacement nodes come up behind the startup taint; burn-in decides.

The simulated Karpenter puts the NodePool's startupTaints on every node it
launches; the watcher starts each new boot's admission; the worker's real
activities run DCGM diag on the simulated host and read the simulated agent's
EFA condition. The first launch is dead on arrival.
"""

from __future__ import annotations

from typing import Any

from demo.stack import DemoStack
from gpu_remediation.admission_models import AdmissionResult
from gpu_remediation.ids import STARTUP_TAINT_KEY, admissions_query
from simulator.fleet import Durations, PoolSpec, Scenario
from simulator.fleet.config import AdmissionSimConfig
from simulator.kube_api import NODES
from tests.conftest import assert_eventually
from tests.e2e.conftest import MakeStack, fleet_call, settled_incidents

GATE_ON = "admission: {enabled: true}"


async def closed_admissions(stack: DemoStack) -> list[AdmissionResult]:
    """Every closed admission of the stack's cluster, oldest first."""
    client = stack.client
    results = []
    async for execution in client.list_workflows(admissions_query(stack.options.cluster)):
        if execution.close_time is None:
            continue
        handle = client.get_workflow_handle(
            execution.id, run_id=execution.run_id, result_type=AdmissionResult
        )
        results.append(await handle.result())
    return sorted(results, key=lambda r: r.started_at)


def taints_of(stack: DemoStack, name: str) -> list[str]:
    node: dict[str, Any] = stack.fleet.store.get(NODES, name)
    return [t["key"] for t in node["spec"].get("taints") or []]


async def test_a_dead_on_arrival_replacement_is_caught_and_replaced_and_the_next_admitted(
    make_stack: MakeStack,
) -> None:
    stack = await make_stack(
        [PoolSpec(name="h100", nodes=6)],
        scenario=Scenario.model_validate(
            {"events": [{"at": "10s", "fault": "row_remap_failure", "node": "h100-0001"}]}
        ),
        policy=GATE_ON,
        admission=AdmissionSimConfig(faulty_launches=[1], faults=["row_remap_failure"]),
    )
    incidents = await settled_incidents(stack, 2, timeout=90)
    assert sorted(i.result or "" for i in incidents) == ["replaced", "replaced"]

    admissions = await assert_eventually(
        lambda: closed_admissions(stack),
        lambda found: [a.outcome for a in found] == ["dead_on_arrival", "admitted"],
        timeout=60,
        interval=0.3,
        message="one DOA caught, one replacement admitted",
    )
    doa, good = admissions
    assert doa.first_boot
    assert doa.handed_to is not None
    assert [(c.name, c.passed) for c in doa.checks] == [("dcgm_diag", False)]
    assert [(c.name, c.passed) for c in good.checks] == [("dcgm_diag", True), ("efa", True)]
    assert good.ready_to_schedulable_s is not None
    # The DOA node was replaced by its own incident; the good one takes work.
    assert not stack.fleet.store.exists(NODES, doa.node)
    assert STARTUP_TAINT_KEY not in taints_of(stack, good.node)
    counters = stack.fleet.snapshot().counters
    assert counters["arrivals.arrival_faulty"] == 1
    assert counters["karpenter.launched"] == 2


async def test_a_worker_killed_mid_burn_in_resumes_and_the_diag_runs_once(
    make_stack: MakeStack,
) -> None:
    # A long burn-in diag (6 simulated minutes = 3 s real) to kill the worker in.
    stack = await make_stack(
        [PoolSpec(name="h100", nodes=5)],
        time_factor=120,
        durations=Durations(diag_level_2="6m"),
        scenario=Scenario.model_validate(
            {"events": [{"at": "10s", "fault": "gpu_hardware", "node": "h100-0001"}]}
        ),
        policy=GATE_ON,
        admission=AdmissionSimConfig(),
    )
    fleet = stack.fleet

    def diag_running() -> int:
        # The simulated host counts a diag when it starts (and runs it for its duration).
        return fleet.snapshot().counters.get("diag.pass", 0)

    await assert_eventually(
        lambda: fleet_call(diag_running),
        lambda started: started >= 1,
        timeout=60,
        interval=0.05,
        message="the burn-in diag runs on the new node",
    )
    stack.worker.kill()
    await stack.restart_worker()
    (admission,) = await assert_eventually(
        lambda: closed_admissions(stack),
        lambda found: len(found) == 1,
        timeout=60,
        interval=0.3,
        message="the admission ends",
    )
    assert admission.outcome == "admitted"
    assert [c.name for c in admission.checks] == ["dcgm_diag", "efa"]  # one diag recorded
    assert fleet.snapshot().counters["diag.pass"] == 1  # the retry resumed the host's run
    assert stack.worker.starts == 2


async def test_a_node_the_incident_rebooted_is_burnt_in_for_its_new_boot_before_work(
    make_stack: MakeStack,
) -> None:
    stack = await make_stack(
        [PoolSpec(name="h100", nodes=5)],
        scenario=Scenario.model_validate(
            {"events": [{"at": "10s", "fault": "fallen_off_bus", "node": "h100-0002"}]}
        ),
        policy=GATE_ON,
        admission=AdmissionSimConfig(),
    )
    boot_before = stack.fleet.boot_id("h100-0002")
    (incident,) = await settled_incidents(stack, 1, timeout=60)
    assert incident.result == "repaired"
    (admission,) = await assert_eventually(
        lambda: closed_admissions(stack),
        lambda found: len(found) == 1,
        timeout=30,
        interval=0.2,
        message="the rebooted node's admission",
    )
    assert admission.node == "h100-0002"
    assert admission.boot_id == stack.fleet.boot_id("h100-0002") != boot_before
    assert admission.trigger == "reboot"
    assert not admission.first_boot
    assert admission.outcome == "admitted"
    # The incident's verification of this boot stands for the diag; EFA is still read.
    assert [(c.name, c.reused) for c in admission.checks] == [("dcgm_diag", True), ("efa", False)]
    assert STARTUP_TAINT_KEY not in taints_of(stack, "h100-0002")
    assert incident.state is not None
    assert any(d.stage == "admission" for d in incident.state.decisions)


async def test_a_replacement_from_a_nodepool_without_the_taint_is_left_ungated(
    make_stack: MakeStack,
) -> None:
    stack = await make_stack(
        [PoolSpec(name="h100", nodes=4)],
        scenario=Scenario.model_validate(
            {"events": [{"at": "10s", "fault": "row_remap_failure", "node": "h100-0001"}]}
        ),
        policy=GATE_ON,
        admission=AdmissionSimConfig(startup_taint=False),
    )
    (incident,) = await settled_incidents(stack, 1, timeout=60)
    assert incident.result == "replaced"
    assert incident.state is not None
    # The new node took work when it turned Ready: no late taint, no burn-in under a job.
    assert any(
        d.stage == "admission" and d.action == "h100-0004 not gated"
        for d in incident.state.decisions
    )
    assert [
        e async for e in stack.client.list_workflows(admissions_query(stack.options.cluster))
    ] == []
    assert STARTUP_TAINT_KEY not in taints_of(stack, "h100-0004")
