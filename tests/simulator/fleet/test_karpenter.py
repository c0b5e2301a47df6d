"""Deleting a NodeClaim through the real activities: drain, terminate, new capacity."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime

from gpu_remediation.contracts import DeleteNodeClaimInput, WaitForReplacementInput
from simulator.fleet import Fleet, WorkloadConfig
from simulator.kube_api import NODECLAIMS, NODES, PODS
from tests.conftest import assert_eventually
from tests.simulator.fleet.conftest import Real


def claim_names(fleet: Fleet) -> set[str]:
    claims, _ = fleet.store.list_objects(NODECLAIMS)
    return {c["metadata"]["name"] for c in claims}


async def test_a_deleted_nodeclaim_is_drained_terminated_and_replaced(
    make_fleet: Callable[..., Fleet], aws_env: None
) -> None:
    fleet = make_fleet(workloads=WorkloadConfig(job_nodes=3, utilization=1.0))
    real = Real(fleet)
    pods = await assert_eventually(
        lambda: asyncio.to_thread(lambda: fleet.store.list_objects(PODS)[0]),
        lambda found: len(found) == 6,
    )
    assert {p["spec"]["nodeName"] for p in pods} == {f"h100-000{i}" for i in range(3)} | {
        f"p5-000{i}" for i in range(3)
    }
    instance = fleet.nodes["h100-0001"].instance_id
    # wait_for_replacement compares creationTimestamps at one-second resolution:
    # step past the second in which the fleet's nodes were created.
    await asyncio.sleep(1.0)
    since = datetime.now(UTC)
    deleted = await real.run(
        "delete_node_claim",
        DeleteNodeClaimInput(
            node="h100-0001", incident_id="i-1", provider_id=fleet.provider_id("h100-0001")
        ),
    )
    assert deleted.node_claim == "h100-0001"
    result = await real.run(
        "wait_for_replacement",
        WaitForReplacementInput(
            node="h100-0001", incident_id="i-1", node_pool="h100", timeout_s=20, since=since
        ),
    )
    assert result.old_node_gone
    assert result.new_node == "h100-0003"
    assert not fleet.store.exists(NODES, "h100-0001")
    assert "h100-0003" in claim_names(fleet)
    assert "h100-0001" not in claim_names(fleet)
    new = fleet.store.get(NODES, "h100-0003")
    assert new["metadata"]["labels"]["karpenter.sh/nodepool"] == "h100"
    assert new["metadata"]["labels"]["nvidia.com/gpu.present"] == "true"
    reservations = fleet.cloud.client("ec2").describe_instances(InstanceIds=[instance])
    state = reservations["Reservations"][0]["Instances"][0]["State"]["Name"]
    assert state in ("shutting-down", "terminated")
    snapshot = fleet.snapshot()
    assert snapshot.counters["karpenter.terminations"] == 1
    assert (snapshot.replacements_in_flight, snapshot.max_replacements_in_flight) == (0, 1)
    assert snapshot.counters["karpenter.launched"] == 1
    # The job on the drained node lost a pod: that run failed, by eviction.
    assert snapshot.jobs is not None
    assert snapshot.jobs["interrupted_by_remediation"] == 1


async def test_a_pool_keeps_its_size_through_replacements(fleet: Fleet, real: Real) -> None:
    for node in ("p5-0000", "p5-0001"):
        await real.run(
            "delete_node_claim",
            DeleteNodeClaimInput(node=node, incident_id="i", provider_id=fleet.provider_id(node)),
        )

    def pool_nodes() -> set[str]:
        nodes, _ = fleet.store.list_objects(NODES)
        return {
            n["metadata"]["name"]
            for n in nodes
            if n["metadata"]["labels"].get("karpenter.sh/nodepool") == "p5"
        }

    await assert_eventually(
        lambda: asyncio.to_thread(pool_nodes),
        lambda names: names == {"p5-0002", "p5-0003", "p5-0004"},
    )
    # Replacements keep their pool's profile; both terminations overlapped.
    assert not fleet.nodes["p5-0003"].reset_supported
    assert fleet.snapshot().max_replacements_in_flight == 2
