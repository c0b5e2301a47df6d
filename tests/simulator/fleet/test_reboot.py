"""EC2 reboots through the real activity: NotReady, then Ready with a new boot id."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from gpu_remediation.contracts import RebootNodeInput
from simulator.fleet import Fleet
from simulator.kube_api import NODES
from tests.simulator.fleet.conftest import Real, condition_status


def reboot_input(fleet: Fleet, node: str, timeout_s: float = 10.0) -> RebootNodeInput:
    return RebootNodeInput(
        node=node,
        incident_id="i-1",
        provider_id=fleet.provider_id(node),
        boot_id_before=fleet.boot_id(node),
        timeout_s=timeout_s,
    )


async def test_a_reboot_goes_not_ready_then_ready_with_a_new_boot_id(
    fleet: Fleet, real: Real
) -> None:
    before = fleet.boot_id("h100-0001")
    watch = fleet.store.watch(NODES, resource_version=fleet.store.resource_version)
    result = await real.run("reboot_node", reboot_input(fleet, "h100-0001"))
    assert result.rebooted_by_this_call
    assert result.boot_id_after != before
    node = fleet.store.get(NODES, "h100-0001")
    assert node["status"]["nodeInfo"]["bootID"] == result.boot_id_after
    # Every change of the node since: Ready went False before it came back True.
    seen = [
        (ready(event["object"]), event["object"]["status"]["nodeInfo"]["bootID"])
        for event in watch.poll(0)
        if event["object"]["metadata"]["name"] == "h100-0001"
    ]
    assert ("False", before) in seen
    assert seen[-1] == ("True", result.boot_id_after)
    assert fleet.snapshot().counters["reboots"] == 1


def ready(node: dict[str, Any]) -> str:
    return next(c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready")


async def test_a_reboot_clears_what_a_reboot_fixes_and_keeps_the_rest(
    fleet: Fleet, real: Real
) -> None:
    for kind, gpu in (("fallen_off_bus", 0), ("gsp_hang", 1), ("xid_reset", 2)):
        fleet.inject(kind, "p5-0002", gpu=gpu)
    fleet.inject("row_remap_failure", "p5-0002", gpu=3)
    fleet.inject("efa_link", "p5-0002")
    await real.run("reboot_node", reboot_input(fleet, "p5-0002"))
    assert fleet.node("p5-0002").faults == ["row_remap_failure on GPU 3 (Xid 64)"]
    # The restarted NPD reports what survived at once.
    conditions = fleet.store.get(NODES, "p5-0002")["status"]["conditions"]
    gpu = next(c for c in conditions if c["type"] == "GpuHealthProblem")
    efa = next(c for c in conditions if c["type"] == "EfaHealthProblem")
    assert gpu["status"] == "True"
    assert gpu["message"].startswith("Xid 64 on GPU 3 (0000:86:00): row remapping failure")
    assert efa["status"] == "False"


async def test_a_hung_host_comes_back_from_a_reboot(fleet: Fleet, real: Real) -> None:
    fleet.inject("host_hang", "h100-0000")
    result = await real.run("reboot_node", reboot_input(fleet, "h100-0000"))
    assert result.rebooted_by_this_call
    assert fleet.node("h100-0000").faults == []


async def test_a_host_with_failed_hardware_never_comes_back(fleet: Fleet, real: Real) -> None:
    fleet.inject("host_failure", "h100-0002")
    with pytest.raises(ApplicationError) as raised:
        await real.run("reboot_node", reboot_input(fleet, "h100-0002", timeout_s=1.0))
    assert raised.value.type == "RebootNotConfirmed"
    assert condition_status(fleet, "h100-0002", "Ready") != "True"
