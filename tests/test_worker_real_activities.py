"""The worker's real activities drive a whole incident: emulator + moto + a Temporal server."""

import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from temporalio.testing import WorkflowEnvironment

from activities.host_commands import HostCommand, encode_output
from gpu_remediation.contracts import QUARANTINE_TAINT_KEY
from gpu_remediation.ids import Signals, node_workflow_id
from gpu_remediation.models import EvidenceReport, Outcome, XidEvidence
from gpu_remediation.settings import Settings
from gpu_remediation.workflow_models import NodeRemediationInput
from simulator.aws import MotoCloud, SimulatedInvocation, moto_cloud
from simulator.kube_api import EVENTS, NODES, PODS, KubeApiServer, KubeStore
from tests.activities.ssm_support import fixture
from tests.conftest import own_semaphore
from tests.workflows.node_support import policy
from worker import build_worker, production_activities
from workflows.node_remediation import NodeRemediationWorkflow


@pytest.fixture
def cloud(monkeypatch: pytest.MonkeyPatch) -> Iterator[MotoCloud]:
    # The worker's boto3 clients use the SDK's normal credential chain.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with moto_cloud() as running:
        yield running


def simulate_hosts(cloud: MotoCloud, store: KubeStore) -> None:
    """EC2 blocks GPU resets; a reboot brings the node back with a new boot id."""

    def host(
        _instance: str, command: HostCommand | None, _script: list[str]
    ) -> SimulatedInvocation:
        assert command is not None
        if command.kind == "gpu_reset":
            return SimulatedInvocation(status="Failed", exit_code=3, stderr="Unknown Error")
        name = "dcgm4_pass.json" if command.kind == "dcgm_diag" else "health_healthy.json"
        return SimulatedInvocation(stdout=encode_output(fixture(name)))

    def reboot(_instance: str) -> None:
        store.set_node_ready("gpu-1", False)
        threading.Timer(
            0.2,
            lambda: (
                store.set_node_boot_id("gpu-1", "boot-1"),
                store.set_node_ready("gpu-1", True),
            ),
        ).start()

    cloud.host_simulator = host
    cloud.on_reboot = reboot


@pytest.mark.parametrize("api_errors", [False, True], ids=["clean", "with-api-500s"])
async def test_a_gpu_fault_is_repaired_by_reboot_through_the_real_activities(
    dev_env: WorkflowEnvironment,
    task_queue: str,
    cloud: MotoCloud,
    kube: KubeApiServer,
    store: KubeStore,
    api_errors: bool,
) -> None:
    (instance,) = cloud.run_instances(1)
    store.put_node(
        "gpu-1", node_pool="h100", provider_id=f"aws:///us-west-2a/{instance}", boot_id="boot-0"
    )
    for peer in range(9):
        store.put_node(f"gpu-peer-{peer}", node_pool="h100")
    store.put_pod("ml", "trainer-0", node_name="gpu-1", gpus=8)
    simulate_hosts(cloud, store)
    settings = Settings(
        kube_api_url=kube.url,
        aws_endpoint_url=cloud.endpoint_url,
        poll_interval=timedelta(milliseconds=20),
        eviction_retry=timedelta(milliseconds=20),
    )
    if api_errors:
        # The client does not retry 500s; Temporal retries the activities.
        kube.faults.inject(r"^/api/v1/nodes/gpu-1$", method="GET", status=500, times=3)
        kube.faults.inject(r"^/api/v1/nodes/gpu-1$", method="PATCH", status=500, times=1)
    cluster = f"c{uuid.uuid4().hex[:8]}"
    async with build_worker(dev_env.client, production_activities(settings), task_queue):
        handle = await dev_env.client.start_workflow(
            NodeRemediationWorkflow.run,
            NodeRemediationInput(
                cluster=cluster,
                node="gpu-1",
                policy=policy(),
                semaphore_workflow_id=own_semaphore(),
            ),
            id=node_workflow_id(cluster, "gpu-1"),
            task_queue=task_queue,
            start_signal=Signals.EVIDENCE,
            start_signal_args=[
                EvidenceReport(
                    node="gpu-1",
                    evidence=[
                        XidEvidence(
                            observed_at=datetime.now(UTC), source="test", xid=48, gpu_index=2
                        )
                    ],
                )
            ],
        )
        result = await handle.result()
    assert result.outcome == Outcome.REPAIRED
    node = store.get(NODES, "gpu-1")
    assert not node["spec"].get("unschedulable")
    assert QUARANTINE_TAINT_KEY not in [t["key"] for t in node["spec"].get("taints") or []]
    assert node["status"]["nodeInfo"]["bootID"] == "boot-1"
    assert cloud.rebooted == [instance]
    assert not store.exists(PODS, "trainer-0", "ml")
    if api_errors:
        assert [r.status for r in kube.requests() if r.status == 500] == [500] * 4
    events, _ = store.list_objects(EVENTS)
    reasons = {e["reason"] for e in events}
    assert {"GpuRemediationQuarantine", "GpuRemediationGpuReset", "GpuRemediationReboot"} <= reasons
