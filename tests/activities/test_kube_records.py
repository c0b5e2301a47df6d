"""Node health, the story on the node, escalation and owner notification."""

import json

from temporalio.testing import ActivityEnvironment

from activities.kubernetes import NEEDS_HUMAN_LABEL, STATE_ANNOTATION, KubernetesActivities
from gpu_remediation import contracts as c
from gpu_remediation.models import FaultClass, Rung
from simulator.kube_api import EVENTS, NODES, KubeStore

ENV = ActivityEnvironment()
PROVIDER = "aws:///us-west-2a/i-0123456789abcdef0"


def events(store: KubeStore) -> list[dict]:  # type: ignore[type-arg]
    items, _ = store.list_objects(EVENTS)
    return items


async def test_node_health_reads_readiness_boot_id_provider_and_pool(
    store: KubeStore, kube_activities: KubernetesActivities
) -> None:
    store.put_node(
        "gpu-1",
        node_pool="h100",
        provider_id=PROVIDER,
        boot_id="boot-a",
        ready=False,
        conditions=[{"type": "GpuHealthProblem", "status": "True", "reason": "GpuXidError"}],
    )
    health = await ENV.run(
        kube_activities.read_node_health, c.ReadNodeHealthInput(node="gpu-1", incident_id="i")
    )
    assert health.exists
    assert not health.ready
    assert (health.boot_id, health.provider_id, health.node_pool) == ("boot-a", PROVIDER, "h100")
    assert {"Ready", "GpuHealthProblem"} <= {cond.type for cond in health.conditions}


async def test_a_missing_node_reads_as_not_existing(kube_activities: KubernetesActivities) -> None:
    health = await ENV.run(
        kube_activities.read_node_health, c.ReadNodeHealthInput(node="gone", incident_id="i")
    )
    assert not health.exists


async def test_each_step_annotates_the_node_and_adds_one_event_even_when_retried(
    store: KubeStore, kube_activities: KubernetesActivities
) -> None:
    store.put_node("gpu-1")
    step = c.RecordStepInput(
        node="gpu-1",
        incident_id="inc-1",
        rung=Rung.REBOOT,
        fault_class=FaultClass.GPU_FALLEN_OFF_BUS,
        message="host rebooted",
    )
    await ENV.run(kube_activities.record_step, step)
    await ENV.run(kube_activities.record_step, step)  # a retry after an ambiguous timeout
    state = json.loads(store.get(NODES, "gpu-1")["metadata"]["annotations"][STATE_ANNOTATION])
    assert (state["rung"], state["incident"], state["message"]) == (
        "reboot",
        "inc-1",
        "host rebooted",
    )
    (event,) = events(store)
    assert event["involvedObject"]["kind"] == "Node"
    assert event["involvedObject"]["name"] == "gpu-1"
    assert event["reason"] == "GpuRemediationReboot"
    assert event["type"] == "Normal"


async def test_escalation_labels_the_node_and_warns(
    store: KubeStore, kube_activities: KubernetesActivities
) -> None:
    store.put_node("gpu-1")
    result = await ENV.run(
        kube_activities.escalate,
        c.EscalateInput(
            node="gpu-1",
            incident_id="inc-2",
            fault_class=FaultClass.ROW_REMAP_FAILURE,
            reason="RMA",
        ),
    )
    node = store.get(NODES, "gpu-1")
    assert node["metadata"]["labels"][NEEDS_HUMAN_LABEL] == "true"
    (event,) = events(store)
    assert event["type"] == "Warning"
    assert event["metadata"]["name"] in result.reference


async def test_workload_owners_get_an_event_on_their_gpu_pods(
    store: KubeStore, kube_activities: KubernetesActivities
) -> None:
    store.put_node("gpu-1")
    store.put_pod("ml", "trainer-0", node_name="gpu-1", gpus=8)
    store.put_pod("ml", "cpu-only", node_name="gpu-1")
    await ENV.run(
        kube_activities.notify_workload_owner,
        c.NotifyWorkloadOwnerInput(
            node="gpu-1",
            incident_id="inc-3",
            fault_class=FaultClass.APPLICATION,
            message="Xid 13 on GPU 0",
        ),
    )
    (event,) = events(store)
    assert event["involvedObject"]["kind"] == "Pod"
    assert event["involvedObject"]["name"] == "trainer-0"
    assert event["metadata"]["namespace"] == "ml"
