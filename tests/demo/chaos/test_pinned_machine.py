"""Issue 35's invariant: an incident's actions carry, and name, the machine triage read."""

from __future__ import annotations

from demo.chaos.facts import ActivityRecord
from demo.chaos.invariants import actions_on_pinned_machine
from gpu_remediation.ids import Activities as A
from tests.demo.chaos.builders import activity, facts, incident, node

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
