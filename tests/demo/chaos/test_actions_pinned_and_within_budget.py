"""Issue 35's invariants: actions carry and name the pinned machine; steps stay within budget."""

from __future__ import annotations

from demo.chaos.facts import ActivityRecord, PermitReleased
from demo.chaos.invariants import actions_on_pinned_machine, steps_within_budget
from gpu_remediation.ids import Activities as A
from tests.demo.chaos.builders import activity, at, facts, incident, node

OLD = "aws:///us-west-2a/i-0old"
PIN = {"uid": "u1", "provider_id": OLD}


def triage() -> list[ActivityRecord]:
    return [
        activity(
            A.READ_NODE_HEALTH, 11, 12, result={"exists": True, "uid": "u1", "provider_id": OLD}
        )
    ]


def test_actions_pinned_to_the_machine_triage_read_hold() -> None:
    run = incident(
        "gpu-0001",
        10,
        50,
        activities=[
            *triage(),
            activity(A.QUARANTINE_NODE, 13, 14, node="gpu-0001", pin=PIN),
            activity(A.REBOOT_NODE, 15, 30, node="gpu-0001", pin=PIN, provider_id=OLD),
        ],
    )
    result = actions_on_pinned_machine(facts([node("gpu-0001", instance_id="i-0old")], [run]))
    assert result.holds
    assert result.checked == "2 action(s) of incidents"


def test_an_action_without_the_pin_or_on_another_instance_is_named() -> None:
    run = incident(
        "gpu-0001",
        10,
        50,
        activities=[
            *triage(),
            activity(A.QUARANTINE_NODE, 13, 14, node="gpu-0001"),
            activity(A.REBOOT_NODE, 15, 30, node="gpu-0001", pin=PIN, provider_id="aws:///x/i-0b"),
        ],
    )
    result = actions_on_pinned_machine(facts([node("gpu-0001", instance_id="i-0old")], [run]))
    assert result.violations == [
        "gpu-remediation/demo/gpu-0001 (run r1): quarantine_node carried pin None, "
        f"triage read ('u1', '{OLD}')",
        f"gpu-remediation/demo/gpu-0001 (run r1): reboot_node named aws:///x/i-0b, pinned {OLD}",
    ]


def test_a_pinned_provider_id_that_is_not_the_nodes_instance_is_named() -> None:
    run = incident(
        "gpu-0001",
        10,
        50,
        activities=[
            *triage(),
            activity(A.RESET_GPUS, 15, 30, node="gpu-0001", pin=PIN, provider_id=OLD),
        ],
    )
    result = actions_on_pinned_machine(facts([node("gpu-0001", instance_id="i-0new")], [run]))
    assert result.violations == [
        f"gpu-remediation/demo/gpu-0001 (run r1): reset_gpus named {OLD}, "
        "but gpu-0001 is instance i-0new"
    ]


def test_reboots_overlapping_past_their_budget_are_named() -> None:
    runs = [
        incident(f"gpu-000{i}", 10, 90, run_id=f"r{i}", activities=[activity(A.REBOOT_NODE, s, e)])
        for i, (s, e) in enumerate([(20, 40), (30, 50), (45, 60)], start=1)
    ]
    within = steps_within_budget(facts([], runs, step_caps={A.REBOOT_NODE: 2}))
    assert within.holds
    assert within.checked == "most at once: reboot_node 2/2"
    over = steps_within_budget(facts([], runs, step_caps={A.REBOOT_NODE: 1}))
    assert over.violations == ["2 reboot_node in force at once, above the budget of 1"]


def test_a_step_that_ends_as_another_begins_is_not_counted_twice() -> None:
    runs = [
        incident("gpu-0001", 10, 90, activities=[activity(A.RESET_GPUS, 20, 40)]),
        incident("gpu-0002", 10, 90, run_id="r2", activities=[activity(A.RESET_GPUS, 40, 60)]),
    ]
    assert steps_within_budget(facts([], runs, step_caps={A.RESET_GPUS: 1})).holds


def test_a_drained_node_counts_until_it_gives_its_drain_permit_back() -> None:
    # gpu-0001 is back in service at 40 (its permit given back); gpu-0002 was
    # replaced and held its permit to its run's end (80); gpu-0003 drains at 50.
    back = incident("gpu-0001", 10, 90, activities=[activity(A.DRAIN_GPU_PODS, 20, 21)])
    back = back.model_copy(
        update={"permits_released": [PermitReleased(at=at(40), request_id="r1/stop_gpu_work/1")]}
    )
    replaced = incident(
        "gpu-0002", 10, 80, run_id="r2", activities=[activity(A.DRAIN_GPU_PODS, 30, 31)]
    )
    late = incident(
        "gpu-0003", 10, 90, run_id="r3", activities=[activity(A.DRAIN_GPU_PODS, 50, 51)]
    )
    runs = [back, replaced, late]
    within = steps_within_budget(facts([], runs, step_caps={A.DRAIN_GPU_PODS: 2}))
    assert within.checked == "most at once: drain_gpu_pods 2/2"
    # By the drain activities' own spans they never overlapped: the permit decides.
    over = steps_within_budget(facts([], runs, step_caps={A.DRAIN_GPU_PODS: 1}))
    assert over.violations == ["2 drain_gpu_pods in force at once, above the budget of 1"]
