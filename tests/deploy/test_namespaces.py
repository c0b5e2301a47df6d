"""Pod Security: the services' namespace is restricted; what needs the host has its own.

The Job executor's privileged host Jobs and the privileged node agent each run in
a namespace of their own with the "privileged" level; the worker, receiver and
watcher run where "restricted" is enforced, so nothing privileged can be started
beside them (and beside the worker's AWS role).
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

from activities.kube_jobs import JobExecutor
from gpu_remediation.host_command import HostCommand
from gpu_remediation.settings import Settings
from tests.deploy.manifests import built, deployments, find, job_executor
from tests.deploy.rbac_support import role

ENFORCE = "pod-security.kubernetes.io/enforce"
SERVICES_NAMESPACE = "gpu-remediation"


def namespace(name: str) -> dict[str, Any]:
    return find(built() + job_executor(), "Namespace", name)


def test_the_services_run_in_a_namespace_that_enforces_restricted() -> None:
    assert {d["metadata"]["namespace"] for d in deployments()} == {SERVICES_NAMESPACE}
    assert namespace(SERVICES_NAMESPACE)["metadata"]["labels"][ENFORCE] == "restricted"
    # Nothing else runs there: every pod template in deploy/ beside the services is elsewhere.
    workloads = [d for d in built() if d["kind"] in ("DaemonSet", "StatefulSet", "Job")]
    assert all(d["metadata"]["namespace"] != SERVICES_NAMESPACE for d in workloads)


def test_the_services_pods_meet_the_restricted_level() -> None:
    for deployment in deployments():
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        assert not any(k in pod for k in ("hostNetwork", "hostPID", "hostIPC"))
        assert all("emptyDir" in v or "configMap" in v for v in pod.get("volumes", []))
        for container in pod["containers"]:
            security = container["securityContext"]
            assert security["allowPrivilegeEscalation"] is False
            assert security["capabilities"]["drop"] == ["ALL"]
            assert not security.get("privileged", False)


def test_the_job_executor_runs_in_a_privileged_namespace_of_its_own() -> None:
    jobs = Settings().job_namespace
    assert jobs != SERVICES_NAMESPACE
    assert namespace(jobs)["metadata"]["labels"][ENFORCE] == "privileged"
    # Its Role lives there, and only there.
    [executor_role] = [d for d in job_executor() if d["kind"] == "Role"]
    assert executor_role["metadata"]["namespace"] == jobs
    assert role("job-executor/rbac.yaml", "Role", "gpu-remediation-job-executor")
    # The Jobs the worker creates go there, and mount no API token.
    manifest = JobExecutor(None, None, Settings()).job_manifest(
        "gpu-remediation-gpu_reset-0", "gpu-1", HostCommand(kind="gpu_reset")
    )
    assert manifest.metadata.namespace == jobs
    pod: client.V1PodSpec = manifest.spec.template.spec
    assert pod.automount_service_account_token is False
    assert pod.containers[0].security_context.privileged is True
    [default] = [
        d
        for d in job_executor()
        if d["kind"] == "ServiceAccount" and d["metadata"]["name"] == "default"
    ]
    assert default["metadata"]["namespace"] == jobs
    assert default["automountServiceAccountToken"] is False


def test_the_privileged_node_agent_runs_in_a_namespace_of_its_own() -> None:
    agent = find(built(), "DaemonSet", "gpu-health-agent")
    agent_namespace = agent["metadata"]["namespace"]
    assert agent_namespace not in (SERVICES_NAMESPACE, Settings().job_namespace)
    assert namespace(agent_namespace)["metadata"]["labels"][ENFORCE] == "privileged"
    [container] = agent["spec"]["template"]["spec"]["containers"]
    assert container["securityContext"]["privileged"] is True
