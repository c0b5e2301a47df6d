"""EC2 reboots over moto, confirmed by the node's boot id in the Kubernetes emulator."""

import dataclasses
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.aws import Ec2Activities
from gpu_remediation.contracts import RebootNodeInput
from simulator.aws import MotoCloud, moto_cloud
from simulator.kube_api import KubeStore


@pytest.fixture
def cloud() -> Iterator[MotoCloud]:
    with moto_cloud() as running:
        yield running


def activities(cloud: MotoCloud, api: Any, **options: Any) -> Ec2Activities:
    return Ec2Activities(
        cloud.client("ec2"),
        client.CoreV1Api(api),
        poll_interval=timedelta(milliseconds=20),
        **options,
    )


def node_for(cloud: MotoCloud, store: KubeStore) -> str:
    (instance,) = cloud.run_instances(1)
    store.put_node("gpu-1", provider_id=f"aws:///us-west-2a/{instance}", boot_id="boot-0")
    return instance


def kubelet_reboots(cloud: MotoCloud, store: KubeStore) -> None:
    """What the host does on a reboot: NotReady, then Ready with a new boot id."""

    def reboot(_instance: str) -> None:
        store.set_node_ready("gpu-1", False)

        def back() -> None:
            store.set_node_boot_id("gpu-1", "boot-1")
            store.set_node_ready("gpu-1", True)

        threading.Timer(0.2, back).start()

    cloud.on_reboot = reboot


def reboot_input(
    instance: str, *, boot_id_before: str = "boot-0", timeout_s: float = 5
) -> RebootNodeInput:
    return RebootNodeInput(
        node="gpu-1",
        incident_id="i",
        provider_id=f"aws:///us-west-2a/{instance}",
        boot_id_before=boot_id_before,
        timeout_s=timeout_s,
    )


async def test_reboot_is_confirmed_by_a_new_boot_id_and_ready(
    cloud: MotoCloud, store: KubeStore, api: Any
) -> None:
    instance = node_for(cloud, store)
    kubelet_reboots(cloud, store)
    result = await ActivityEnvironment().run(
        activities(cloud, api).reboot_node, reboot_input(instance)
    )
    assert (result.boot_id_after, result.rebooted_by_this_call) == ("boot-1", True)
    assert cloud.rebooted == [instance]


async def test_reboot_is_skipped_when_the_boot_id_already_changed(
    cloud: MotoCloud, store: KubeStore, api: Any
) -> None:
    instance = node_for(cloud, store)
    store.set_node_boot_id("gpu-1", "boot-1")  # the earlier attempt's reboot happened
    result = await ActivityEnvironment().run(
        activities(cloud, api).reboot_node, reboot_input(instance)
    )
    assert (result.boot_id_after, result.rebooted_by_this_call) == ("boot-1", False)
    assert cloud.rebooted == []


async def test_a_retry_that_recorded_the_reboot_waits_instead_of_rebooting_again(
    cloud: MotoCloud, store: KubeStore, api: Any
) -> None:
    instance = node_for(cloud, store)
    env = ActivityEnvironment()
    issued = datetime.now(UTC).timestamp()
    env.info = dataclasses.replace(
        env.info, attempt=2, heartbeat_details=[{"reboot_issued_at": issued}]
    )
    threading.Timer(0.2, lambda: store.set_node_boot_id("gpu-1", "boot-1")).start()
    result = await env.run(activities(cloud, api).reboot_node, reboot_input(instance))
    assert result.boot_id_after == "boot-1"
    assert cloud.rebooted == []


async def test_an_ambiguous_retry_watches_before_issuing_the_reboot(
    cloud: MotoCloud, store: KubeStore, api: Any
) -> None:
    instance = node_for(cloud, store)
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=2, heartbeat_details=[])
    threading.Timer(0.2, lambda: store.set_node_boot_id("gpu-1", "boot-1")).start()
    ec2 = activities(cloud, api, ambiguous_retry_wait=timedelta(seconds=2))
    result = await env.run(ec2.reboot_node, reboot_input(instance))
    assert (result.boot_id_after, result.rebooted_by_this_call) == ("boot-1", False)
    assert cloud.rebooted == []


async def test_a_reboot_never_confirmed_is_a_retryable_error(
    cloud: MotoCloud, store: KubeStore, api: Any
) -> None:
    instance = node_for(cloud, store)
    with pytest.raises(ApplicationError, match="not confirmed") as err:
        await ActivityEnvironment().run(
            activities(cloud, api).reboot_node, reboot_input(instance, timeout_s=0.3)
        )
    assert err.value.type == "RebootNotConfirmed"
    assert not err.value.non_retryable
    assert cloud.rebooted == [instance]


async def test_rebooting_a_vanished_node_is_not_retried(cloud: MotoCloud, api: Any) -> None:
    (instance,) = cloud.run_instances(1)
    with pytest.raises(ApplicationError) as err:
        await ActivityEnvironment().run(activities(cloud, api).reboot_node, reboot_input(instance))
    assert err.value.type == "NodeNotFound"
    assert err.value.non_retryable
