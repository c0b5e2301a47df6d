"""Issue 35: mutating activities act only on the machine the incident pinned.

A node name can come back as another machine (a new instance under a reused
name): each activity that acts by name refuses it with ``NodeReplaced``, which
no retry changes, and leaves it untouched.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from kubernetes import client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.aws import Ec2Activities
from activities.kubernetes import KubernetesActivities
from gpu_remediation import contracts as c
from gpu_remediation.models import FaultClass
from simulator.aws import MotoCloud, moto_cloud
from simulator.kube_api import NODES, KubeStore

ENV = ActivityEnvironment()
OLD = "aws:///us-west-2a/i-0old"
NEW = "aws:///us-west-2a/i-0new"
IDS = {"node": "gpu-1", "incident_id": "gpu-remediation/c/gpu-1"}


def pin_then_replace(store: KubeStore) -> c.NodePin:
    """Pin the node as triage would, then bring the name back as another machine."""
    old = store.put_node("gpu-1", provider_id=OLD)
    pin = c.NodePin(uid=old["metadata"]["uid"], provider_id=OLD)
    store.delete(NODES, "gpu-1")
    store.put_node("gpu-1", provider_id=NEW)
    return pin


async def refused(call: Any, arg: Any) -> ApplicationError:
    with pytest.raises(ApplicationError) as raised:
        await ENV.run(call, arg)
    assert raised.value.type == "NodeReplaced"
    assert raised.value.non_retryable
    return raised.value


async def test_quarantine_release_record_escalate_and_drain_refuse_another_machine(
    store: KubeStore, kube_activities: KubernetesActivities
) -> None:
    pin = pin_then_replace(store)
    before = store.get(NODES, "gpu-1")

    await refused(kube_activities.quarantine_node, c.QuarantineNodeInput(**IDS, pin=pin))
    await refused(kube_activities.release_node, c.ReleaseNodeInput(**IDS, pin=pin))
    await refused(kube_activities.record_step, c.RecordStepInput(**IDS, pin=pin, message="m"))
    escalate = c.EscalateInput(
        **IDS, pin=pin, fault_class=FaultClass.UNKNOWN, reason="r", summary="s"
    )
    await refused(kube_activities.escalate, escalate)
    drain = c.DrainGpuPodsInput(**IDS, pin=pin, timeout_s=1)
    message = str(await refused(kube_activities.drain_gpu_pods, drain))
    assert pin.uid in message

    after = store.get(NODES, "gpu-1")
    assert after["spec"] == before["spec"]  # neither cordoned nor tainted
    assert after["metadata"].get("annotations") == before["metadata"].get("annotations")
    assert after["metadata"].get("labels") == before["metadata"].get("labels")


async def test_the_pinned_machine_itself_is_acted_on(
    store: KubeStore, kube_activities: KubernetesActivities
) -> None:
    node = store.put_node("gpu-1", provider_id=OLD)
    pin = c.NodePin(uid=node["metadata"]["uid"], provider_id=OLD)
    result = await ENV.run(kube_activities.quarantine_node, c.QuarantineNodeInput(**IDS, pin=pin))
    assert result.taint_added
    assert store.get(NODES, "gpu-1")["spec"]["unschedulable"] is True


async def test_the_same_object_with_another_provider_id_is_another_machine(
    store: KubeStore, kube_activities: KubernetesActivities
) -> None:
    node = store.put_node("gpu-1", provider_id=OLD)
    pin = c.NodePin(uid=node["metadata"]["uid"], provider_id="aws:///us-west-2a/i-0other")
    await refused(kube_activities.quarantine_node, c.QuarantineNodeInput(**IDS, pin=pin))


@pytest.fixture
def cloud() -> Iterator[MotoCloud]:
    with moto_cloud() as running:
        yield running


async def test_a_reboot_is_not_issued_when_the_name_is_another_machine(
    cloud: MotoCloud, api: Any, store: KubeStore
) -> None:
    old, new = cloud.run_instances(2)
    first = store.put_node("gpu-1", provider_id=f"aws:///us-west-2a/{old}", boot_id="boot-0")
    pin = c.NodePin(uid=first["metadata"]["uid"], provider_id=f"aws:///us-west-2a/{old}")
    store.delete(NODES, "gpu-1")
    store.put_node("gpu-1", provider_id=f"aws:///us-west-2a/{new}", boot_id="boot-0")
    rebooted: list[str] = []
    cloud.on_reboot = rebooted.append
    ec2 = Ec2Activities(
        cloud.client("ec2"), client.CoreV1Api(api), poll_interval=timedelta(milliseconds=20)
    )
    arg = c.RebootNodeInput(
        **IDS, pin=pin, provider_id=pin.provider_id, boot_id_before="boot-0", timeout_s=5
    )
    await refused(ec2.reboot_node, arg)
    assert rebooted == []
