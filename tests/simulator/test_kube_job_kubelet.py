"""The simulated kubelet for host-command Jobs: pod, log, terminated state, Job status."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from kubernetes import client

from activities.kube_jobs import JobExecutor
from gpu_remediation.host_command import HostCommand
from gpu_remediation.settings import Settings
from simulator.kube_api import JOBS, PODS, HostResult, JobKubelet, KubeStore, job_command

T = TypeVar("T")
NS = Settings().job_namespace


def wait_for(probe: Callable[[], T], timeout: float = 5.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout}s; last value: {value!r}")
        time.sleep(0.01)


def manifest(name: str, command: HostCommand, node: str = "gpu-1") -> Any:
    return JobExecutor(None, None, Settings()).job_manifest(name, node, command)


def job_pods(store: KubeStore, name: str) -> list[dict[str, Any]]:
    pods, _ = store.list_objects(PODS, NS)
    return [p for p in pods if p["metadata"]["labels"].get("job-name") == name]


def finished(batch: Any, name: str) -> list[str]:
    job = batch.read_namespaced_job(name, NS)
    return [c.type for c in job.status.conditions or [] if c.status == "True"]


def test_a_managed_job_runs_on_its_node(batch: Any, core: Any, kube_store: KubeStore) -> None:
    seen: list[tuple[str, HostCommand | None]] = []

    def host(job: dict[str, Any], command: HostCommand | None) -> HostResult:
        seen.append((job["spec"]["template"]["spec"]["nodeName"], command))
        return HostResult(0, "GPU 00000000:53:00.0 was successfully reset.\n", "warn\n")

    command = HostCommand(kind="gpu_reset", gpu_indices=[2])
    with JobKubelet(kube_store, host) as kubelet:
        batch.create_namespaced_job(NS, manifest("reset-1", command))
        assert wait_for(lambda: finished(batch, "reset-1")) == ["SuccessCriteriaMet", "Complete"]
    assert seen == [("gpu-1", command)]
    assert [c for _, c in kubelet.seen] == [command]
    (pod,) = job_pods(kube_store, "reset-1")
    assert pod["spec"]["nodeName"] == "gpu-1"
    assert pod["status"]["phase"] == "Succeeded"
    (status,) = pod["status"]["containerStatuses"]
    assert status["state"]["terminated"]["exitCode"] == 0
    log = core.read_namespaced_pod_log(pod["metadata"]["name"], NS, _preload_content=False)
    assert log.data.decode() == "warn\nGPU 00000000:53:00.0 was successfully reset.\n"
    job = batch.read_namespaced_job("reset-1", NS)
    assert (job.status.succeeded, job.status.active) == (1, 0)


def test_a_failing_command_fails_the_job(batch: Any, kube_store: KubeStore) -> None:
    with JobKubelet(kube_store, lambda _job, _cmd: (15, "", "fallen off the bus")):
        batch.create_namespaced_job(NS, manifest("reset-2", HostCommand(kind="gpu_reset")))
        assert "Failed" in wait_for(lambda: finished(batch, "reset-2"))
    (pod,) = job_pods(kube_store, "reset-2")
    assert pod["status"]["phase"] == "Failed"
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (15, "Error")


def test_no_pod_runs_when_the_runner_says_so(batch: Any, kube_store: KubeStore) -> None:
    with JobKubelet(kube_store, lambda _job, _cmd: None):
        batch.create_namespaced_job(NS, manifest("never", HostCommand(kind="dcgm_health")))
        assert "Failed" in wait_for(lambda: finished(batch, "never"))
    job = batch.read_namespaced_job("never", NS)
    (failed,) = [c for c in job.status.conditions if c.type == "Failed"]
    assert failed.reason == "DeadlineExceeded"
    assert job_pods(kube_store, "never") == []


def test_delays_expose_pending_and_running(batch: Any, kube_store: KubeStore) -> None:
    go = threading.Event()

    def host(_job: dict[str, Any], _command: HostCommand | None) -> HostResult:
        go.wait(5)
        return HostResult(0)

    def running() -> list[dict[str, Any]]:
        return [p for p in job_pods(kube_store, "slow") if p["status"]["phase"] == "Running"]

    with JobKubelet(kube_store, host, start_delay=0.05, run_delay=0.5):
        batch.create_namespaced_job(NS, manifest("slow", HostCommand(kind="dcgm_health")))
        assert job_pods(kube_store, "slow") == []  # the host has not answered yet
        go.set()
        (pod,) = wait_for(running)
        assert pod["status"]["containerStatuses"][0]["state"]["running"]
        assert batch.read_namespaced_job("slow", NS).status.active == 1
        wait_for(lambda: finished(batch, "slow"))


def test_other_jobs_are_left_alone(batch: Any, kube_store: KubeStore) -> None:
    runs: list[object] = []
    with JobKubelet(kube_store, lambda job, cmd: runs.append(cmd) or HostResult(0)):
        body = manifest("foreign", HostCommand(kind="dcgm_health"))
        body.metadata.labels = {"app": "other"}
        batch.create_namespaced_job(NS, body)
        time.sleep(0.05)
    assert runs == []
    assert not kube_store.get(JOBS, "foreign", NS)["status"].get("conditions")


def test_deleting_the_job_mid_run_is_not_an_error(batch: Any, kube_store: KubeStore) -> None:
    with JobKubelet(kube_store, lambda _j, _c: HostResult(0), run_delay=0.2) as kubelet:
        batch.create_namespaced_job(NS, manifest("gone", HostCommand(kind="dcgm_health")))
        wait_for(lambda: job_pods(kube_store, "gone"))
        batch.delete_namespaced_job("gone", NS, propagation_policy="Background")
    assert kubelet.errors == []


def test_a_broken_runner_fails_loudly(batch: Any, kube_store: KubeStore) -> None:
    def host(_job: dict[str, Any], _command: HostCommand | None) -> HostResult:
        raise KeyError("no such host")

    kubelet = JobKubelet(kube_store, host).start()
    batch.create_namespaced_job(NS, manifest("broken", HostCommand(kind="dcgm_health")))
    wait_for(lambda: kubelet.errors)
    with pytest.raises(RuntimeError, match="no such host"):
        kubelet.stop()


def test_job_command_reads_the_tag_line_only_from_our_scripts() -> None:
    command = HostCommand(kind="dcgm_diag", level=3, gpu_indices=[1, 0])
    job = client.ApiClient().sanitize_for_serialization(manifest("x", command))
    assert job_command(job) == command
    job["spec"]["template"]["spec"]["containers"][0]["command"] = ["nvidia-smi", "-r"]
    assert job_command(job) is None
    bad_tag = "# gpu-remediation host-command: {not json}\nnvidia-smi -r"
    job["spec"]["template"]["spec"]["containers"][0]["command"] = ["/bin/sh", "-c", bad_tag]
    assert job_command(job) is None
