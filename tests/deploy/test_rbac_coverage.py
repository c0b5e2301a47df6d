"""deploy/'s RBAC grants exactly the Kubernetes calls the activities and the watcher make.

Dynamic: every Kubernetes-facing activity (and the Job executor, and the
watcher's list+watch) runs against the API emulator, which logs each request;
each request is resolved to its RBAC attributes as the API server would, and
compared with the roles both ways: every request is allowed, every rule is used.

Static: every client method the code calls is known here (so a new call
without a rule fails even if no scenario below exercises it).
"""

from __future__ import annotations

import asyncio
import re
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client
from temporalio.testing import ActivityEnvironment

from activities.aws import Ec2Activities
from activities.host import HostActivities
from activities.host_commands import encode_output
from activities.kube_admission import KubeAdmissionActivities
from activities.kube_jobs import JobExecutor
from activities.kube_workloads import WorkloadActivities
from activities.kubernetes import KubernetesActivities
from gpu_remediation import admission_models as a
from gpu_remediation import contracts as c
from gpu_remediation import job_contracts as j
from gpu_remediation.jobs import OPT_IN_ANNOTATION, OPT_IN_VALUE
from gpu_remediation.models import FaultClass, Rung, Urgency
from gpu_remediation.policy import DEFAULT_JOB_LABEL_KEYS
from gpu_remediation.settings import Settings
from simulator.kube_api import (
    EXTERNAL_REMEDIATION_REQUESTS,
    NODES,
    HostResult,
    JobKubelet,
    KubeApiServer,
    KubeStore,
)
from tests.activities.ssm_support import fixture
from tests.deploy.chart_support import documents, render
from tests.deploy.rbac_support import Access, attributes, role, rule_accesses
from tests.deploy.support import DEPLOY, REPO, yaml_documents
from tests.gpu_remediation.nccl_outputs import all_reduce_output
from triggers.list_watch import ListWatch
from triggers.nvsentinel import ExternalRemediationRelay
from triggers.watcher import NodeSource

ENV = ActivityEnvironment()
PROVIDER = "aws:///us-west-2a/i-0123456789abcdef0"
JOB_NAMESPACE = Settings().job_namespace
# GPU nodes (and their NodeClaims) carry this label: the worker's admission
# policies (deploy/worker-admission.yaml) let it change no other node.
GPU = {"nvidia.com/gpu.present": "true"}

WORKER = role("rbac.yaml", "ClusterRole", "gpu-remediation-worker")
WATCHER = role("rbac.yaml", "ClusterRole", "gpu-remediation-watcher")
JOB_EXECUTOR = role("job-executor/rbac.yaml", "Role", "gpu-remediation-job-executor")

# What each client method the code calls needs (the watcher's list_node also watches).
METHODS = {
    "read_node": {Access("", "nodes", "get")},
    "list_node": {Access("", "nodes", "list")},
    "patch_node": {Access("", "nodes", "patch")},
    "list_pod_for_all_namespaces": {Access("", "pods", "list")},
    "patch_namespaced_pod": {Access("", "pods", "patch")},
    "create_namespaced_pod_eviction": {Access("", "pods/eviction", "create")},
    "create_namespaced_event": {Access("", "events", "create")},
    "list_cluster_custom_object": {Access("karpenter.sh", "nodeclaims", "list")},
    "delete_cluster_custom_object": {Access("karpenter.sh", "nodeclaims", "delete")},
    "create_namespaced_job": {Access("batch", "jobs", "create")},
    "read_namespaced_job": {Access("batch", "jobs", "get")},
    "delete_namespaced_job": {Access("batch", "jobs", "delete")},
    "list_namespaced_pod": {Access("", "pods", "list")},
    "read_namespaced_pod_log": {Access("", "pods/log", "get")},
}
CLIENT_CALL = re.compile(r"self\._(?:core|custom|batch)\.(\w+)\b")
TRIGGER_CALL = re.compile(r"(?:core|CoreV1Api\(api_client\))\.(list_\w+)\b")


def requested(kube: KubeApiServer) -> set[Access]:
    return {attributes(r.method, r.path, r.query) for r in kube.requests() if r.status}


def settings(**changes: Any) -> Settings:
    return Settings(
        eviction_retry=timedelta(milliseconds=20),
        poll_interval=timedelta(milliseconds=20),
        **changes,
    )


async def run_kubernetes_activities(store: KubeStore, api: Any) -> None:
    """Each Kubernetes activity once, on a small cluster where it has work to do."""
    kube = KubernetesActivities(client.CoreV1Api(api), client.CustomObjectsApi(api), settings())
    store.put_node("gpu-1", node_pool="h100", provider_id=PROVIDER, boot_id="boot-1", labels=GPU)
    store.put_node("gpu-2", node_pool="h100", labels=GPU)
    store.put_pod(
        "ml",
        "trainer-0",
        node_name="gpu-1",
        gpus=8,
        labels={"jobset.sigs.k8s.io/jobset-name": "llm"},
        annotations={OPT_IN_ANNOTATION: OPT_IN_VALUE},
    )
    store.put_nodeclaim(
        "h100-abc", node_pool="h100", provider_id=PROVIDER, node_name="gpu-1", labels=GPU
    )
    node = {"node": "gpu-1", "incident_id": "inc-1"}
    await ENV.run(kube.read_node_health, c.ReadNodeHealthInput(**node))
    await ENV.run(kube.quarantine_node, c.QuarantineNodeInput(**node))
    await ENV.run(kube.check_breaker, c.CheckBreakerInput(node_pool="h100"))
    await ENV.run(
        kube.notify_workload_owner,
        c.NotifyWorkloadOwnerInput(**node, fault_class=FaultClass.APPLICATION, message="Xid 13"),
    )
    await run_job_activities(api, node)
    await ENV.run(kube.drain_gpu_pods, c.DrainGpuPodsInput(**node, timeout_s=5))
    await ENV.run(
        kube.record_step,
        c.RecordStepInput(**node, rung=Rung.REBOOT, message="rebooted"),
    )
    await ENV.run(
        kube.escalate,
        c.EscalateInput(**node, fault_class=FaultClass.HARDWARE_FAILURE, reason="exhausted"),
    )
    await ENV.run(kube.release_node, c.ReleaseNodeInput(**node))
    # The pool's other node (gpu-2) must predate the deletion by a whole second
    # (creationTimestamp has 1 s resolution), or it would be taken as the new node.
    await asyncio.sleep(1.1)
    since = datetime.now(UTC)
    await ENV.run(kube.delete_node_claim, c.DeleteNodeClaimInput(**node, provider_id=PROVIDER))

    # The old node goes first and the new one comes later, as Karpenter launches it:
    # the wait lists the pool once, then watches it.
    threading.Timer(0.1, lambda: store.delete(NODES, "gpu-1")).start()
    threading.Timer(0.4, lambda: store.put_node("gpu-9", node_pool="h100", labels=GPU)).start()
    await ENV.run(
        kube.wait_for_replacement,
        c.WaitForReplacementInput(**node, node_pool="h100", timeout_s=5, since=since),
    )
    # A reboot whose boot id already changed reads the node and stops (no EC2 call).
    store.put_node("gpu-3", provider_id=PROVIDER, boot_id="boot-2", labels=GPU)
    ec2 = Ec2Activities(None, client.CoreV1Api(api), poll_interval=timedelta(milliseconds=20))
    await ENV.run(
        ec2.reboot_node,
        c.RebootNodeInput(
            node="gpu-3",
            incident_id="inc-3",
            provider_id=PROVIDER,
            boot_id_before="boot-1",
            timeout_s=5,
        ),
    )
    await run_admission_activities(store, api)


async def run_admission_activities(store: KubeStore, api: Any) -> None:
    """Admission's activities: hold (taint added), the agent's EFA verdict, admit."""
    admission = KubeAdmissionActivities(client.CoreV1Api(api), settings())
    store.put_node("gpu-4", node_pool="h100", provider_id=PROVIDER, boot_id="boot-4", labels=GPU)
    node = {"node": "gpu-4", "boot_id": "boot-4", "admission_id": "adm-4"}
    hold = await ENV.run(
        admission.hold_for_admission, a.HoldForAdmissionInput(**node, add_taint=True)
    )
    assert hold.taint_added
    await ENV.run(admission.check_efa, a.CheckEfaInput(**node))
    admitted = await ENV.run(admission.admit_node, a.AdmitNodeInput(**node))
    assert admitted.status == "admitted"


async def run_job_activities(api: Any, node: dict[str, str]) -> None:
    """The job stage's activities: find the jobs, ask them, withdraw the request."""
    workloads = WorkloadActivities(client.CoreV1Api(api), settings())
    keys = list(DEFAULT_JOB_LABEL_KEYS)
    found = await ENV.run(workloads.find_node_jobs, j.FindNodeJobsInput(**node, label_keys=keys))
    assert [job.name for job in found.jobs] == ["llm"]
    incident = "gpu-remediation/default/gpu-1/run-1"
    await ENV.run(
        workloads.request_checkpoint,
        j.RequestCheckpointInput(
            **node,
            request_incident=incident,
            deadline=datetime.now(UTC) + timedelta(minutes=5),
            urgency=Urgency.CHECKPOINT_FIRST,
            label_keys=keys,
            jobs=found.jobs,
        ),
    )
    await ENV.run(
        workloads.withdraw_checkpoint,
        j.WithdrawCheckpointInput(
            **node, request_incident=incident, label_keys=keys, jobs=found.jobs
        ),
    )


async def test_the_worker_role_allows_every_call_of_the_activities_and_nothing_more(
    kube: KubeApiServer, store: KubeStore, api: Any
) -> None:
    await run_kubernetes_activities(store, api)
    made = requested(kube)
    assert made - WORKER == set(), (
        f"calls the role does not allow: {sorted(map(str, made - WORKER))}"
    )
    assert WORKER - made == set(), f"rules no activity uses: {sorted(map(str, WORKER - made))}"


async def test_the_job_executor_role_covers_its_jobs_pods_and_logs(
    kube: KubeApiServer, store: KubeStore, api: Any
) -> None:
    store.put_node("gpu-1", provider_id=PROVIDER)

    def host(_job: dict[str, Any], command: Any) -> HostResult:
        if command.kind == "gpu_reset":
            return HostResult(0, "GPU 00000000:53:00.0 was successfully reset.\n")
        name = "dcgm4_pass.json" if command.kind == "dcgm_diag" else "health_healthy.json"
        return HostResult(0, encode_output(fixture(name)))

    job_settings = settings(host_executor="job", job_namespace=JOB_NAMESPACE)
    with JobKubelet(store, host):
        executor = JobExecutor(client.BatchV1Api(api), client.CoreV1Api(api), job_settings)
        host_activities = HostActivities(executor)
        node = {"node": "gpu-1", "incident_id": "i", "provider_id": PROVIDER}
        await ENV.run(host_activities.reset_gpus, c.ResetGpusInput(**node, gpu_indices=[2]))
        await ENV.run(host_activities.run_diagnostic, c.RunDiagnosticInput(**node, level=2))
    made = requested(kube)
    allowed = WORKER | JOB_EXECUTOR
    assert made - allowed == set(), sorted(map(str, made - allowed))
    assert JOB_EXECUTOR - made == set(), sorted(map(str, JOB_EXECUTOR - made))


async def test_the_burn_in_nccl_job_needs_nothing_beyond_the_job_executor_role(
    kube: KubeApiServer, store: KubeStore, api: Any
) -> None:
    store.put_node("gpu-1", boot_id="boot-1")

    def host(_job: dict[str, Any], _command: Any) -> HostResult:
        return HostResult(0, all_reduce_output(480.0))

    job_settings = settings(job_namespace=JOB_NAMESPACE)
    with JobKubelet(store, host):
        admission = KubeAdmissionActivities(client.CoreV1Api(api), job_settings)
        checked = await ENV.run(
            admission.run_nccl_check,
            a.RunNcclCheckInput(
                node="gpu-1",
                boot_id="boot-1",
                admission_id="adm-1",
                image="nccl-tests",
                min_bus_bandwidth_gbps=300,
                timeout_s=600,
            ),
        )
    assert checked.passed
    made = requested(kube)
    allowed = WORKER | JOB_EXECUTOR
    assert made - allowed == set(), sorted(map(str, made - allowed))
    assert JOB_EXECUTOR - made == set(), sorted(map(str, JOB_EXECUTOR - made))


def test_the_job_executor_role_is_namespaced_to_the_job_namespace() -> None:
    docs = yaml_documents(DEPLOY / "job-executor" / "rbac.yaml")
    assert {d["kind"] for d in docs} == {"Role", "RoleBinding"}
    assert {d["metadata"]["namespace"] for d in docs} == {Settings().job_namespace}


def test_the_watcher_role_allows_its_list_and_watch_and_nothing_more(
    kube: KubeApiServer, store: KubeStore, api: Any
) -> None:
    store.put_node("gpu-1", labels={"nvidia.com/gpu.present": "true"})
    seen: list[Any] = []
    core = client.CoreV1Api(api)
    nodes = NodeSource(core, "nvidia.com/gpu.present=true", seen.append)
    # The checkpoint relay's source, as CheckpointRelay builds it.
    pods = ListWatch(core.list_pod_for_all_namespaces, "", seen.append, lambda *_: None)
    for source in (nodes, pods):
        thread = threading.Thread(target=source.run, daemon=True)
        thread.start()
        deadline = datetime.now(UTC) + timedelta(seconds=10)
        while source.lists == 0 or not any(
            r.query and "watch=" in r.query and ("/pods" in r.path) == (source is pods)
            for r in kube.requests()
        ):
            assert datetime.now(UTC) < deadline, "the watcher never watched"
            threading.Event().wait(0.02)
        source.stop()
        thread.join(5)
    made = requested(kube)
    assert made == WATCHER, sorted(map(str, made))


def test_every_client_method_the_code_calls_is_known_and_allowed() -> None:
    for path in (REPO / "activities").glob("*.py"):
        for method in set(CLIENT_CALL.findall(path.read_text())):
            assert method in METHODS, f"{path.name} calls {method}: map it and grant it"
            assert METHODS[method] <= WORKER | JOB_EXECUTOR, (path.name, method)
    # The watcher and the relay hand a list method to their list-then-watch source.
    for name in ("watcher.py", "checkpoint_relay.py"):
        calls = set(TRIGGER_CALL.findall((REPO / "triggers" / name).read_text()))
        assert calls, f"{name}: no client call found (has the pattern gone stale?)"
        for method in calls:
            assert method in METHODS, f"{name} calls {method}: map it and grant it"
            assert METHODS[method] <= WATCHER, (name, method)


def test_the_receiver_has_no_kubernetes_credentials() -> None:
    [account] = [
        d
        for d in yaml_documents(DEPLOY / "rbac.yaml")
        if d["kind"] == "ServiceAccount" and d["metadata"]["name"] == "gpu-remediation-receiver"
    ]
    assert account["automountServiceAccountToken"] is False
    bound = [
        s["name"]
        for d in yaml_documents(DEPLOY / "rbac.yaml")
        if d["kind"].endswith("Binding")
        for s in d["subjects"]
    ]
    assert "gpu-remediation-receiver" not in bound


class _Starter:
    """Stands in for the incident starter (Temporal is not what this test is about)."""

    def __init__(self) -> None:
        self.reports: list[tuple[str, str | None]] = []

    def workflow_id(self, node: str) -> str:
        return f"test/{node}"

    async def report(self, node: str, evidence: Any, *, report_id: str | None = None) -> str:
        self.reports.append((node, report_id))
        return self.workflow_id(node)


async def test_the_nvsentinel_rules_allow_the_relays_calls_and_nothing_more(
    kube: KubeApiServer, store: KubeStore, api: Any
) -> None:
    # The chart's watcher role with nvsentinel.enabled, less the role deploy/ holds.
    docs = documents(
        render({"settings": {"GPU_REMEDIATION_CLUSTER": "c"}, "nvsentinel": {"enabled": True}})
    )
    [enabled] = [
        d
        for d in docs
        if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "gpu-remediation-watcher"
    ]
    extra = rule_accesses(enabled["rules"]) - WATCHER
    for name, node in (("err-watched", "gpu-1"), ("err-elsewhere", "cpu-1")):
        store.create(
            EXTERNAL_REMEDIATION_REQUESTS,
            {
                "apiVersion": "nvsentinel.dgxc.nvidia.com/v1",
                "kind": "ExternalRemediationRequest",
                "metadata": {"name": name},
                "spec": {"healthEvent": {"nodeName": node, "recommendedAction": "RESTART_BM"}},
            },
        )
    starter = _Starter()
    relay = ExternalRemediationRelay(
        api,
        starter,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        watches=lambda node: node == "gpu-1",
        ready=lambda: True,
    )
    thread = threading.Thread(target=relay.source.run, daemon=True)
    thread.start()
    deadline = datetime.now(UTC) + timedelta(seconds=10)
    while relay.source.lists == 0 or not any(
        r.query and "watch=" in r.query for r in kube.requests()
    ):
        assert datetime.now(UTC) < deadline, "the relay never watched"
        await asyncio.sleep(0.02)
    await relay.pass_once()  # takes one request, answers the other
    relay.source.stop()
    thread.join(5)
    uid = store.get(EXTERNAL_REMEDIATION_REQUESTS, "err-watched")["metadata"]["uid"]
    assert starter.reports == [("gpu-1", f"nvsentinel-{uid}")]
    assert relay.answered == 1
    made = requested(kube)
    assert made == extra, sorted(map(str, made))
