"""The fleet's nodes coming and going: EC2 instances, Nodes, NodeClaims and NodePools.

Seeding builds each pool (its NodePool, its instances in moto, a Ready Node
and NodeClaim per instance); Karpenter's launches add single nodes the same
way, and its terminations remove them. The inventory also owns the names
(``<pool>-0000`` onwards, never reused) and the instance-to-node map the SSM
and reboot adapters look nodes up by.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

from gpu_remediation import catalog
from gpu_remediation.ids import STARTUP_TAINT_KEY
from simulator.fleet.agent import (
    DEGRADED_HEALTHY,
    EFA_DEGRADED_HEALTHY,
    EFA_HEALTHY,
    GPU_HEALTHY,
    READY,
)
from simulator.fleet.config import PoolSpec
from simulator.fleet.injector import Slots
from simulator.fleet.model import NodeState, Phase
from simulator.fleet.ports import InventoryFleet
from simulator.kube_api import NODEPOOLS

AMI = "ami-12c6146b"
LAUNCH_BATCH = 500
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
STARTUP_TAINT = {"key": STARTUP_TAINT_KEY, "effect": "NoSchedule"}


def nodepool(pool: PoolSpec, startup_taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """The Karpenter NodePool object of ``pool`` (with ``startupTaints`` when given)."""
    template_spec: dict[str, Any] = {
        "nodeClassRef": {
            "group": "karpenter.k8s.aws",
            "kind": "EC2NodeClass",
            "name": "default",
        },
        "requirements": [
            {
                "key": "node.kubernetes.io/instance-type",
                "operator": "In",
                "values": [pool.instance_type],
            }
        ],
    }
    if startup_taints:
        template_spec["startupTaints"] = startup_taints
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": pool.name},
        "spec": {
            "template": {
                "metadata": {"labels": {GPU_PRESENT_LABEL: "true"}},
                "spec": template_spec,
            },
            "disruption": {"budgets": [{"nodes": "10%"}]},
        },
        "status": {},
    }


class Inventory:
    """Adds and removes the fleet's nodes, in moto and in the Kubernetes store.

    Args:
        fleet: The fleet whose model and store the nodes go into.
        on_added: Called (outside the lock) after a new node is Ready, so
            waiting jobs can be placed on it.
    """

    def __init__(
        self, fleet: InventoryFleet, on_added: Callable[[], None], *, slots: Slots | None = None
    ) -> None:
        self._fleet = fleet
        self._slots = slots
        self._on_added = on_added
        self._by_instance: dict[str, str] = {}
        self._seq: Counter[str] = Counter()
        self._ec2: Any = None

    def seed(self, ec2: Any) -> None:
        """Build every configured pool, launching its instances through ``ec2`` (moto's client)."""
        self._ec2 = ec2
        fleet = self._fleet
        admission = fleet.config.admission
        taints = [STARTUP_TAINT] if admission is not None and admission.startup_taint else None
        for pool in fleet.config.pools:
            fleet.store.put(NODEPOOLS, nodepool(pool, taints))
            if pool.nodes:
                for instance_id in self.launch_instances(pool, pool.nodes):
                    self.add_node(self.next_node_name(pool.name), pool, instance_id)

    def node_name_for_instance(self, instance_id: str) -> str | None:
        """The node running on EC2 instance ``instance_id``."""
        with self._fleet.lock:
            return self._by_instance.get(instance_id)

    def next_node_name(self, pool: str) -> str:
        """A new node (and NodeClaim) name in ``pool``."""
        with self._fleet.lock:
            name = f"{pool}-{self._seq[pool]:04d}"
            self._seq[pool] += 1
            return name

    def launch_instances(self, pool: PoolSpec, count: int) -> list[str]:
        """Run ``count`` instances of the pool's type in moto; return their ids."""
        ids: list[str] = []
        while len(ids) < count:
            batch = min(LAUNCH_BATCH, count - len(ids))
            reservation = self._ec2.run_instances(
                ImageId=AMI,
                MinCount=batch,
                MaxCount=batch,
                InstanceType=pool.instance_type,
                Placement={"AvailabilityZone": self._fleet.config.zone},
                TagSpecifications=[
                    {
                        "ResourceType": "instance",
                        "Tags": [{"Key": "karpenter.sh/nodepool", "Value": pool.name}],
                    }
                ],
            )
            ids += [instance["InstanceId"] for instance in reservation["Instances"]]
        return ids

    def terminate_instance(self, instance_id: str) -> None:
        """Terminate an instance in moto (idempotent, as EC2 is)."""
        self._ec2.terminate_instances(InstanceIds=[instance_id])

    def add_node(
        self,
        name: str,
        pool: PoolSpec,
        instance_id: str,
        taints: list[dict[str, Any]] | None = None,
    ) -> None:
        """Register a new Ready node (and its Ready NodeClaim) running on ``instance_id``.

        ``taints`` are on the Node from its registration (a NodePool's ``startupTaints``).
        """
        fleet = self._fleet
        config = fleet.config
        interval = config.durations.npd_interval.total_seconds()
        with fleet.lock:
            node = NodeState(
                name=name,
                pool=pool.name,
                instance_id=instance_id,
                zone=config.zone,
                boot_id=str(uuid.UUID(int=fleet.rng.getrandbits(128), version=4)),
                reset_supported=pool.reset_supported,
                gpus=pool.gpus_per_node,
                agent_phase=fleet.rng.random() * interval,
                created_at=fleet.clock.now(),
                written_gpu=GPU_HEALTHY,
                written_efa=EFA_HEALTHY,
                written_degraded=DEGRADED_HEALTHY,
                written_efa_degraded=EFA_DEGRADED_HEALTHY,
                written_ready=READY,
                written_allocatable=pool.gpus_per_node,
            )
            fleet.nodes[name] = node
            self._by_instance[instance_id] = name
            if self._slots is not None:
                self._slots.added(name, pool.name)
        labels = {
            GPU_PRESENT_LABEL: "true",
            "nvidia.com/gpu.count": str(pool.gpus_per_node),
            "node.kubernetes.io/instance-type": pool.instance_type,
            "topology.kubernetes.io/zone": config.zone,
            "karpenter.sh/capacity-type": "on-demand",
            "karpenter.sh/registered": "true",
            "karpenter.sh/initialized": "true",
        }
        conditions = [
            {"type": type_, "status": status, "reason": reason, "message": message}
            for type_, (status, reason, message) in (
                (catalog.NPD_GPU_CONDITION, GPU_HEALTHY),
                (catalog.NPD_EFA_CONDITION, EFA_HEALTHY),
                (catalog.NPD_GPU_DEGRADED_CONDITION, DEGRADED_HEALTHY),
                (catalog.NPD_EFA_DEGRADED_CONDITION, EFA_DEGRADED_HEALTHY),
            )
        ]
        fleet.store.put_node(
            name,
            node_pool=pool.name,
            provider_id=node.provider_id,
            labels=labels,
            boot_id=node.boot_id,
            gpus=pool.gpus_per_node,
            conditions=conditions,
            taints=[dict(t) for t in taints] if taints else None,
        )
        fleet.store.put_nodeclaim(
            name, node_pool=pool.name, provider_id=node.provider_id, node_name=name, ready=True
        )
        with fleet.lock:
            fleet.accounting.track(node, fleet.clock.now())
        self._on_added()

    def remove_node(self, name: str) -> None:
        """Forget a terminated node (its slot stays unavailable until a new node is Ready)."""
        fleet = self._fleet
        with fleet.lock:
            node = fleet.nodes.get(name)
            if node is None:
                return
            node.phase = Phase.GONE
            fleet.accounting.track(node, fleet.clock.now())
            del fleet.nodes[name]
            self._by_instance.pop(node.instance_id, None)
            if self._slots is not None:
                self._slots.removed(name, node.pool)
            fleet.count("nodes.terminated")
