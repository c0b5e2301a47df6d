"""End to end, one fault at a time: the right rung fixes it, and no other runs."""

from __future__ import annotations

from simulator.fleet import PoolSpec
from simulator.kube_api import NODES
from tests.conftest import assert_eventually
from tests.e2e.conftest import MakeStack, attempts, decisions, fleet_call, settled_incidents


async def test_xid_79_is_fixed_by_a_reboot_and_never_triggers_a_reset(
    make_stack: MakeStack,
) -> None:
    stack = await make_stack([PoolSpec(name="h100", nodes=5)])
    fleet = stack.fleet
    boot_before = fleet.boot_id("h100-0002")
    fleet.inject("fallen_off_bus", "h100-0002", gpu=3)

    (incident,) = await settled_incidents(stack, 1)

    assert incident.node == "h100-0002"
    assert incident.fault_class == "gpu_fallen_off_bus"
    assert incident.result == "repaired"
    assert "gpu_reset" not in attempts(incident)
    assert attempts(incident)[-1] == "reboot"
    counters = fleet.snapshot().counters
    assert counters["reboots"] == 1
    assert not [key for key in counters if key.startswith("resets.")]  # no nvidia-smi -r ran
    assert fleet.node("h100-0002").faults == []
    assert fleet.boot_id("h100-0002") != boot_before
    node = await fleet_call(lambda: fleet.store.get(NODES, "h100-0002"))
    assert not node["spec"].get("unschedulable")
    assert not node["spec"].get("taints")


async def test_a_row_remapping_failure_ends_in_replacement(make_stack: MakeStack) -> None:
    stack = await make_stack([PoolSpec(name="h100", nodes=5)])
    fleet = stack.fleet
    fleet.inject("row_remap_failure", "h100-0001", gpu=5)

    (incident,) = await settled_incidents(stack, 1)

    assert incident.fault_class == "row_remap_failure"
    assert incident.result == "replaced"
    # Issue 18: Xid 64 resets first (NVIDIA: RESET_GPU); the verification then
    # finds the remapping failure (DCGM 80), which replaces without a reboot.
    assert attempts(incident)[-2:] == ["gpu_reset", "replace"]
    assert "reboot" not in attempts(incident)
    snapshot = fleet.snapshot()
    assert not fleet.has_node("h100-0001")
    assert snapshot.counters["karpenter.terminations"] == 1
    assert snapshot.counters.get("reboots", 0) == 0
    # Karpenter kept the pool at its size with a new, healthy node.
    assert snapshot.nodes == snapshot.nodes_ready == 5
    assert snapshot.truly_faulty == []


async def test_a_reset_unsupported_profile_climbs_to_reboot(make_stack: MakeStack) -> None:
    stack = await make_stack([PoolSpec(name="p5", nodes=5, reset_supported=False)])
    fleet = stack.fleet
    fleet.inject("xid_reset", "p5-0003", gpu=1)

    (incident,) = await settled_incidents(stack, 1)

    assert incident.fault_class == "gpu_reset_required"
    assert incident.result == "repaired"
    assert incident.state is not None
    reset, reboot = [a for a in incident.state.attempts if a.rung in ("gpu_reset", "reboot")]
    assert (reset.rung, reset.result) == ("gpu_reset", "not_supported")
    assert reboot.rung == "reboot"
    counters = fleet.snapshot().counters
    assert counters["resets.exit_3"] == 1  # nvidia-smi -r: "not supported"
    assert counters["reboots"] == 1
    assert fleet.node("p5-0003").faults == []


async def test_a_slow_gpu_is_caught_by_its_condition_and_repaired_by_a_reset(
    make_stack: MakeStack,
) -> None:
    # Issue 37: the node stays Ready; only the agent's GpuDegraded condition says so.
    stack = await make_stack([PoolSpec(name="h100", nodes=5)])
    fleet = stack.fleet
    fleet.inject("gpu_degraded", "h100-0003", gpu=2)

    (incident,) = await settled_incidents(stack, 1)

    assert incident.fault_class == "gpu_degraded"
    assert incident.result == "repaired"
    assert attempts(incident)[-1] == "gpu_reset"
    assert fleet.node("h100-0003").faults == []
    assert fleet.snapshot().counters.get("reboots", 0) == 0


async def test_a_slow_efa_port_is_rebooted_and_verified_under_load(make_stack: MakeStack) -> None:
    # Issue 37, ADR 028: the reboot retrains the port; the loopback then loads every
    # EFA device through the simulated host before the agent's counters are read.
    stack = await make_stack([PoolSpec(name="h100", nodes=5)])
    fleet = stack.fleet
    fleet.inject("efa_degraded", "h100-0002")

    (incident,) = await settled_incidents(stack, 1)

    assert (incident.fault_class, incident.result) == ("efa_degraded", "repaired")
    assert attempts(incident)[-1] == "reboot"
    verdicts = [d for d in decisions(incident) if d[0] == "verify"]
    assert verdicts == [("verify", "EFA load test pass"), ("verify", "efa_check pass")]
    assert fleet.snapshot().counters["efa_loopback.runs"] == 1
    assert fleet.node("h100-0002").faults == []


async def test_a_slow_efa_port_the_reboot_did_not_cure_fails_under_load_and_is_replaced(
    make_stack: MakeStack,
) -> None:
    # The settle is long enough (12 s here) to give the port its fault back after the
    # reboot and before the load test: a cable or switch port a reboot cannot fix.
    stack = await make_stack(
        [PoolSpec(name="h100", nodes=5)], policy="verification: {efa_degraded_settle: 2h}"
    )
    fleet = stack.fleet
    boot = fleet.boot_id("h100-0002")
    fleet.inject("efa_degraded", "h100-0002")
    await assert_eventually(
        lambda: fleet_call(lambda: fleet.boot_id("h100-0002")),
        lambda now: now != boot,
        timeout=30,
        message="h100-0002 back from its reboot",
    )
    fleet.inject("efa_degraded", "h100-0002")

    (incident,) = await settled_incidents(stack, 1, timeout=60)

    assert (incident.fault_class, incident.result) == ("efa_degraded", "replaced")
    assert attempts(incident)[-2:] == ["reboot", "replace"]
    assert incident.state is not None
    [verdict] = [d for d in incident.state.decisions if d.stage == "verify"]
    assert verdict.action == "efa_check fail"
    assert "rdmap113s0: retrans_timeout_events rose by 250 under the load" in verdict.reason
    counters = fleet.snapshot().counters
    assert counters["efa_loopback.runs"] == 1
    assert counters["karpenter.terminations"] == 1
