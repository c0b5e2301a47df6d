"""Quarantine and release against the Kubernetes API emulator."""

import threading

from kubernetes import client
from temporalio.testing import ActivityEnvironment

from activities.kubernetes import KubernetesActivities
from gpu_remediation.contracts import QUARANTINE_TAINT_KEY, QuarantineNodeInput, ReleaseNodeInput
from simulator.kube_api import NODES, KubeApiServer, KubeStore

ENV = ActivityEnvironment()


def quarantine(node: str = "gpu-1") -> QuarantineNodeInput:
    return QuarantineNodeInput(node=node, incident_id="gpu-remediation/c/gpu-1")


def release(node: str = "gpu-1", *, uncordon: bool = True) -> ReleaseNodeInput:
    return ReleaseNodeInput(node=node, incident_id="gpu-remediation/c/gpu-1", uncordon=uncordon)


def taint_keys(store: KubeStore, node: str = "gpu-1") -> list[str]:
    return [t["key"] for t in store.get(NODES, node)["spec"].get("taints") or []]


async def test_quarantine_cordons_and_taints_and_is_idempotent(
    store: KubeStore, kube_activities: KubernetesActivities
) -> None:
    store.put_node("gpu-1", taints=[{"key": "other", "effect": "NoSchedule"}])
    first = await ENV.run(kube_activities.quarantine_node, quarantine())
    again = await ENV.run(kube_activities.quarantine_node, quarantine())
    node = store.get(NODES, "gpu-1")
    assert node["spec"]["unschedulable"] is True
    assert taint_keys(store) == ["other", QUARANTINE_TAINT_KEY]
    assert (first.taint_added, first.was_already_cordoned) == (True, False)
    assert (again.taint_added, again.was_already_cordoned) == (False, False)


async def test_release_removes_only_the_quarantine_taint_and_uncordons(
    store: KubeStore, kube_activities: KubernetesActivities
) -> None:
    store.put_node("gpu-1", taints=[{"key": "other", "effect": "NoSchedule"}])
    await ENV.run(kube_activities.quarantine_node, quarantine())
    result = await ENV.run(kube_activities.release_node, release())
    node = store.get(NODES, "gpu-1")
    assert (result.taint_removed, result.uncordoned) == (True, True)
    assert taint_keys(store) == ["other"]
    assert not node["spec"].get("unschedulable")
    assert "gpu-remediation.io/was-cordoned" not in (node["metadata"].get("annotations") or {})


async def test_a_node_cordoned_by_an_operator_is_remembered_across_retries(
    store: KubeStore, kube_activities: KubernetesActivities
) -> None:
    store.put_node("gpu-1", unschedulable=True)
    first = await ENV.run(kube_activities.quarantine_node, quarantine())
    retried = await ENV.run(kube_activities.quarantine_node, quarantine())
    assert first.was_already_cordoned
    assert retried.was_already_cordoned


async def test_taint_added_while_another_writer_changes_the_node_loses_nothing(
    kube: KubeApiServer, store: KubeStore, kube_activities: KubernetesActivities
) -> None:
    store.put_node("gpu-1")
    # Our PATCH waits in the server while another writer labels the node:
    # the PATCH's resourceVersion is stale, so it must re-read and retry.
    kube.faults.inject(r"^/api/v1/nodes/gpu-1$", method="PATCH", latency=0.5, times=1)

    def other_writer() -> None:
        with kube.api_client() as api:
            client.CoreV1Api(api).patch_node("gpu-1", {"metadata": {"labels": {"team": "ml"}}})

    writer = threading.Timer(0.2, other_writer)
    writer.start()
    await ENV.run(kube_activities.quarantine_node, quarantine())
    writer.join()
    node = store.get(NODES, "gpu-1")
    assert node["metadata"]["labels"]["team"] == "ml"
    assert taint_keys(store) == [QUARANTINE_TAINT_KEY]
    patches = [
        r for r in kube.faults.requests() if r.method == "PATCH" and r.path == "/api/v1/nodes/gpu-1"
    ]
    assert [r.status for r in patches][-2:] == [409, 200]


async def test_release_can_leave_the_node_cordoned(
    store: KubeStore, kube_activities: KubernetesActivities
) -> None:
    store.put_node("gpu-1")
    await ENV.run(kube_activities.quarantine_node, quarantine())
    result = await ENV.run(kube_activities.release_node, release(uncordon=False))
    assert (result.taint_removed, result.uncordoned) == (True, False)
    assert store.get(NODES, "gpu-1")["spec"]["unschedulable"] is True


async def test_release_of_a_vanished_node_is_done(kube_activities: KubernetesActivities) -> None:
    result = await ENV.run(kube_activities.release_node, release("gone-1"))
    assert (result.taint_removed, result.uncordoned) == (False, False)
