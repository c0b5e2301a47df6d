"""NVIDIA NVSentinel's hand-over, end to end: an ExternalRemediationRequest in the
simulated cluster opens the node's incident, the ladder repairs the node, and the
outcome lands on the request as NVSentinel's design 040 expects it
(``ExternalRemediationComplete``); requests that name no watched node or no node at all
are answered False at once."""

from __future__ import annotations

from typing import Any

from gpu_remediation import nvsentinel as nvs
from simulator.fleet import PoolSpec
from simulator.kube_api import EXTERNAL_REMEDIATION_REQUESTS as ERR
from simulator.nvsentinel import released
from tests.conftest import assert_eventually
from tests.e2e.conftest import MakeStack, attempts, fleet_call, settled_incidents


def _request(name: str, health_event: dict[str, Any]) -> dict[str, Any]:
    """A request as NVSentinel's fault-remediation creates it (design 040's example)."""
    return {
        "apiVersion": f"{nvs.GROUP}/{nvs.VERSION}",
        "kind": nvs.KIND,
        "metadata": {
            "name": name,
            "labels": {"nvsentinel.nvidia.com/component-class": "GPU"},
        },
        "spec": {"healthEvent": health_event},
    }


def _conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


async def test_a_request_opens_the_incident_and_gets_its_outcome(make_stack: MakeStack) -> None:
    stack = await make_stack([PoolSpec(name="h100", nodes=4)], nvsentinel=True)
    fleet = stack.fleet
    # A slow GPU: nothing the simulated node agent reports, so only NVSentinel's word
    # opens the incident.
    fleet.inject("gpu_slow", "h100-0002", gpu=3)
    store = fleet.store

    def hand_over() -> None:
        event = {
            "version": 1,
            "agent": "gpu-health-monitor",
            "componentClass": "GPU",
            "checkName": "GpuPerformanceWatch",
            "isFatal": True,
            "isHealthy": False,
            "message": "GPU 3 below its expected throughput",
            "recommendedAction": "COMPONENT_RESET",
            "errorCode": ["DCGM_FR_CLOCKS_EVENT_THERMAL"],
            "entitiesImpacted": [{"entityType": "GPU", "entityValue": "3"}],
            "nodeName": "h100-0002",
            "id": "he-1",
        }
        store.create(ERR, _request("err-h100-0002-he-1", event))
        store.mutate(ERR, "err-h100-0002-he-1", None, released)

    await fleet_call(hand_over)

    (incident,) = await settled_incidents(stack, 1, timeout=60)
    assert incident.node == "h100-0002"
    assert incident.fault_class == "gpu_reset_required"
    assert incident.result == "repaired"
    assert attempts(incident)[-1] == "gpu_reset"

    answered = await assert_eventually(
        lambda: fleet_call(lambda: store.get(ERR, "err-h100-0002-he-1")),
        lambda obj: _conditions(obj).get(nvs.COMPLETE, {}).get("status") == "True",
        timeout=30,
        interval=0.2,
        message="the outcome written back",
    )
    conditions = _conditions(answered)
    assert conditions[nvs.COMPLETE]["reason"] == "Repaired"
    assert incident.workflow_id in conditions[nvs.COMPLETE]["message"]
    assert conditions["NVSentinelOwnershipReleased"]["status"] == "True"  # theirs, kept
    assert answered["status"]["completionTime"]
    assert nvs.PICKED_UP_ANNOTATION in answered["metadata"]["annotations"]
    assert fleet.node("h100-0002").faults == []


async def test_requests_for_no_watched_node_or_no_node_are_answered_false(
    make_stack: MakeStack,
) -> None:
    stack = await make_stack([PoolSpec(name="h100", nodes=2)], nvsentinel=True)
    store = stack.fleet.store

    def hand_over() -> None:
        store.create(ERR, _request("err-elsewhere", {"nodeName": "cpu-node-7", "checkName": "x"}))
        store.create(ERR, _request("err-nameless", {"checkName": "SysLogsXIDError"}))

    await fleet_call(hand_over)

    for name, reason in (("err-elsewhere", "NodeNotWatched"), ("err-nameless", "InvalidRequest")):
        answered = await assert_eventually(
            lambda name=name: fleet_call(lambda: store.get(ERR, name)),
            lambda obj: nvs.COMPLETE in _conditions(obj),
            timeout=30,
            interval=0.2,
            message=f"{name} answered",
        )
        condition = _conditions(answered)[nvs.COMPLETE]
        assert (condition["status"], condition["reason"]) == ("False", reason)
    assert await stack.book.refresh_list() == []


async def test_the_simulated_nvsentinel_hands_an_xid_over_and_gets_its_answer(
    make_stack: MakeStack,
) -> None:
    stack = await make_stack([PoolSpec(name="h100", nodes=3)], nvsentinel=True)
    fleet = stack.fleet
    fleet.inject("fallen_off_bus", "h100-0001", gpu=2)

    (incident,) = await settled_incidents(stack, 1, timeout=60)
    assert incident.result == "repaired"
    [request] = await fleet_call(lambda: fleet.store.peek(ERR))
    assert request["spec"]["healthEvent"]["errorCode"] == ["79"]
    answered = await assert_eventually(
        lambda: fleet_call(lambda: fleet.store.get(ERR, request["metadata"]["name"])),
        lambda obj: _conditions(obj).get(nvs.COMPLETE, {}).get("status") == "True",
        timeout=30,
        interval=0.2,
        message="the outcome written back",
    )
    assert _conditions(answered)[nvs.COMPLETE]["reason"] == "Repaired"
    assert stack.nvsentinel is not None
    assert stack.nvsentinel.created == 1
