"""New capacity behind the NodePool's startup taint, and nodes that come up faulty.

The simulated Karpenter puts the NodePool's ``startupTaints`` on the Node when
it registers (the first version of the object already carries them), a node
behind the taint counts as unschedulable (so unavailable) until the taint is
removed, and arrivals (launches, reboots) can come up faulty as configured.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from gpu_remediation.contracts import RebootNodeInput
from gpu_remediation.ids import STARTUP_TAINT_KEY
from simulator.fleet import Fleet
from simulator.fleet.config import AdmissionSimConfig
from simulator.kube_api import NODECLAIMS, NODEPOOLS, NODES
from tests.conftest import assert_eventually
from tests.simulator.fleet.conftest import Real, small_config
from whatif.runner import available_now

TAINT = {"key": STARTUP_TAINT_KEY, "effect": "NoSchedule"}


def taint_keys(obj: dict[str, Any]) -> list[str]:
    return [t["key"] for t in obj["spec"].get("taints") or []]


async def replaced(fleet: Fleet, old: str, new: str) -> None:
    """Delete ``old``'s NodeClaim and wait until Karpenter's new node ``new`` is registered."""
    fleet.store.delete_object(NODECLAIMS, old)
    await assert_eventually(
        lambda: asyncio.to_thread(
            lambda: fleet.store.exists(NODES, new) and not fleet.store.exists(NODES, old)
        ),
        lambda done: done,
        message=f"{new} registered and {old} gone",
    )


def untaint(fleet: Fleet, name: str) -> None:
    def change(node: dict[str, Any]) -> None:
        node["spec"]["taints"] = [t for t in node["spec"].get("taints") or [] if t != TAINT]

    fleet.store.mutate(NODES, name, None, change)


async def test_karpenter_registers_new_nodes_with_the_nodepools_startup_taint(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet(admission=AdmissionSimConfig())
    pool = fleet.store.get(NODEPOOLS, "h100")
    assert pool["spec"]["template"]["spec"]["startupTaints"] == [TAINT]
    # Nodes that were there before the gate have no taint.
    assert STARTUP_TAINT_KEY not in taint_keys(fleet.store.get(NODES, "h100-0000"))
    watch = fleet.store.watch(NODES, resource_version=fleet.store.resource_version)
    await replaced(fleet, "h100-0001", "h100-0003")
    added = [
        event["object"]
        for event in watch.poll(0)
        if event["type"] == "ADDED" and event["object"]["metadata"]["name"] == "h100-0003"
    ]
    assert len(added) == 1
    assert STARTUP_TAINT_KEY in taint_keys(added[0])  # on the Node from its registration


async def test_without_startup_taints_in_the_nodepool_new_nodes_register_untainted(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet(admission=AdmissionSimConfig(startup_taint=False))
    assert "startupTaints" not in fleet.store.get(NODEPOOLS, "h100")["spec"]["template"]["spec"]
    await replaced(fleet, "h100-0001", "h100-0003")
    assert taint_keys(fleet.store.get(NODES, "h100-0003")) == []
    assert fleet.node("h100-0003").schedulable


async def test_a_node_behind_the_startup_taint_is_unavailable_until_the_taint_is_removed(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet(admission=AdmissionSimConfig())
    await replaced(fleet, "h100-0001", "h100-0003")
    truth = fleet.node("h100-0003")
    assert (truth.ready, truth.real_fault, truth.schedulable) == (True, False, False)
    assert available_now(fleet) == 5  # of 6 slots: the gated node does not count
    assert fleet.snapshot().availability["schedulable"] < 1.0
    untaint(fleet, "h100-0003")
    assert fleet.node("h100-0003").schedulable
    assert available_now(fleet) == 6


async def test_the_listed_launch_comes_up_faulty_and_the_next_one_healthy(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet(
        admission=AdmissionSimConfig(faulty_launches=[1], faults=["row_remap_failure"])
    )
    await replaced(fleet, "h100-0001", "h100-0003")
    assert fleet.node("h100-0003").real_fault
    assert fleet.snapshot().counters["arrivals.arrival_faulty"] == 1
    await replaced(fleet, "h100-0002", "h100-0004")
    assert not fleet.node("h100-0004").real_fault
    assert fleet.snapshot().counters["arrivals.arrival_faulty"] == 1


async def test_a_rebooted_node_comes_up_faulty_with_the_configured_probability(
    make_fleet: Callable[..., Fleet], aws_env: None
) -> None:
    fleet = make_fleet(
        admission=AdmissionSimConfig(reboot_fault_probability=1.0, faults=["efa_device_missing"])
    )
    real = Real(fleet)
    before = fleet.boot_id("p5-0001")
    await real.run(
        "reboot_node",
        RebootNodeInput(
            node="p5-0001",
            incident_id="i-1",
            provider_id=fleet.provider_id("p5-0001"),
            boot_id_before=before,
            timeout_s=10,
        ),
    )
    assert fleet.boot_id("p5-0001") != before
    assert fleet.node("p5-0001").real_fault
    assert fleet.snapshot().counters["arrivals.reboot_arrival_faulty"] == 1


async def test_whether_a_launch_is_faulty_does_not_depend_on_other_draws_of_the_fleet() -> None:
    # Two policies differ in how many boot ids (shared generator draws) they cause
    # before a launch; the Nth launch must meet the same fault either way. With the
    # tests' seed (7) and 0.6, the first launch is faulty and the second is not.
    config = AdmissionSimConfig(new_node_fault_probability=0.6)
    outcomes = []
    for extra_draws in (0, 7):
        # One fleet at a time: fleets share moto's EC2 backend.
        fleet = Fleet(small_config(admission=config)).start()
        try:
            for _ in range(extra_draws):
                fleet.rng.random()
            await replaced(fleet, "h100-0001", "h100-0003")
            await replaced(fleet, "h100-0002", "h100-0004")
            outcomes.append(
                [(f.node, f.kind, f.gpu) for f in fleet.fault_log() if f.source == "arrival"]
            )
        finally:
            fleet.stop()
    assert outcomes[0] == outcomes[1]
    assert [node for node, _, _ in outcomes[0]] == ["h100-0003"]
