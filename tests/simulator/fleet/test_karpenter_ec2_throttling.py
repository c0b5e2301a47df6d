"""EC2 throttling under Karpenter: a throttled termination or launch is retried, nothing is lost."""

from __future__ import annotations

import asyncio

from gpu_remediation.contracts import DeleteNodeClaimInput
from simulator.fleet import Fleet
from simulator.kube_api import NODES
from tests.conftest import assert_eventually
from tests.simulator.fleet.conftest import Real


def _pool(fleet: Fleet, pool: str) -> set[str]:
    nodes, _ = fleet.store.list_objects(NODES)
    return {
        n["metadata"]["name"]
        for n in nodes
        if n["metadata"]["labels"].get("karpenter.sh/nodepool") == pool
    }


async def test_a_throttled_termination_is_retried_until_ec2_takes_it(
    fleet: Fleet, real: Real
) -> None:
    instance = fleet.nodes["h100-0001"].instance_id
    fleet.cloud.throttle_ec2 = 3

    await real.run(
        "delete_node_claim",
        DeleteNodeClaimInput(
            node="h100-0001", incident_id="i-1", provider_id=fleet.provider_id("h100-0001")
        ),
    )

    await assert_eventually(
        lambda: asyncio.to_thread(_pool, fleet, "h100"),
        lambda names: names == {"h100-0000", "h100-0002", "h100-0003"},
        timeout=20,
        message="the node replaced once the throttling passed",
    )
    throttled = fleet.cloud.ec2_throttled
    # The termination comes first; on a slow machine the replacement's launch may take
    # what is left of the budget: each throttled call was retried either way.
    assert len(throttled) == 3
    assert throttled[0] == "TerminateInstances"
    counters = fleet.snapshot().counters
    assert counters["karpenter.terminate_retried"] == throttled.count("TerminateInstances")
    assert counters.get("karpenter.launch_retried", 0) == throttled.count("RunInstances")
    assert (counters["karpenter.terminations"], counters["karpenter.launched"]) == (1, 1)
    described = fleet.cloud.client("ec2").describe_instances(InstanceIds=[instance])
    state = described["Reservations"][0]["Instances"][0]["State"]["Name"]
    assert state in ("shutting-down", "terminated")


async def test_a_throttled_launch_is_retried_and_its_node_registers_once(fleet: Fleet) -> None:
    fleet.cloud.throttle_ec2 = 2
    pool = fleet.pool("h100")

    fleet.scheduler.call_soon(lambda: fleet.karpenter.provision(pool))

    await assert_eventually(
        lambda: asyncio.to_thread(_pool, fleet, "h100"),
        lambda names: "h100-0003" in names,
        timeout=20,
        message="the new node registered once the throttling passed",
    )
    assert fleet.cloud.ec2_throttled == ["RunInstances"] * 2
    counters = fleet.snapshot().counters
    assert (counters["karpenter.launch_retried"], counters["karpenter.launched"]) == (2, 1)
