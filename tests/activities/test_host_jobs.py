"""GPU reset and diagnostics through a privileged Job, over HTTP against the emulator.

The same scenarios as ``test_host_ssm.py``; a simulated kubelet runs the Jobs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.host import HostActivities
from activities.host_commands import HostCommand, encode_output
from activities.kube_jobs import (
    KEEP_FINISHED_S,
    MAX_LOG_BYTES,
    JobExecutor,
    read_container_log,
)
from gpu_remediation.contracts import ResetGpusInput, RunDiagnosticInput, RunEfaLoopbackInput
from gpu_remediation.host_command import MAX_ENCODED_OUTPUT
from gpu_remediation.models import EfaEvidence
from gpu_remediation.settings import Settings
from simulator.fleet.faults import FaultKind
from simulator.kube_api import JOBS, PODS, HostResult, JobKubelet, KubeApiServer, KubeStore
from tests.activities.ssm_support import fixture
from tests.activities.test_host_ssm import simulated_loopback

NS = "gpu-jobs"
RESET = ResetGpusInput(node="gpu-1", incident_id="i", provider_id="aws:///us-west-2a/i-0abc")
DIAG = RunDiagnosticInput(
    node="gpu-1", incident_id="i", provider_id="aws:///us-west-2a/i-0abc", level=2
)
LOOPBACK = RunEfaLoopbackInput(
    node="gpu-1", incident_id="i", provider_id="aws:///us-west-2a/i-0abc"
)


class Hosts:
    """Scripted host answers per command kind; None: the Job's pod never runs."""

    def __init__(self) -> None:
        self.reset: HostResult | None = HostResult(
            0, "GPU 00000000:53:00.0 was successfully reset.\n"
        )
        self.diag: HostResult | None = HostResult(0, encode_output(fixture("dcgm4_pass.json")))
        self.health: HostResult | None = HostResult(
            0, encode_output(fixture("health_healthy.json"))
        )
        self.loopback: HostResult | None = HostResult(0, simulated_loopback())
        self.seen: list[tuple[str, HostCommand | None]] = []

    def __call__(self, job: dict[str, Any], command: HostCommand | None) -> HostResult | None:
        self.seen.append((job["spec"]["template"]["spec"]["nodeName"], command))
        if command is None:
            return HostResult(127, "", "unknown script")
        return {
            "gpu_reset": self.reset,
            "dcgm_diag": self.diag,
            "dcgm_health": self.health,
            "efa_loopback": self.loopback,
        }[command.kind]


@pytest.fixture
def job_settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"job_namespace": NS})


@pytest.fixture
def hosts() -> Hosts:
    return Hosts()


@pytest.fixture(autouse=True)
def node(store: KubeStore) -> None:
    """The machine the inputs name: a Job runs only on the incident's machine."""
    store.put_node("gpu-1", provider_id="aws:///us-west-2a/i-0abc")


@pytest.fixture
def kubelet(store: KubeStore, hosts: Hosts) -> Iterator[JobKubelet]:
    with JobKubelet(store, hosts) as running:
        yield running


@pytest.fixture
def executor(api: Any, job_settings: Settings, kubelet: JobKubelet) -> JobExecutor:
    del kubelet  # running before the executor creates anything
    return JobExecutor(client.BatchV1Api(api), client.CoreV1Api(api), job_settings)


def nothing_left(store: KubeStore) -> bool:
    jobs, _ = store.list_objects(JOBS, NS)
    pods, _ = store.list_objects(PODS, NS)
    return not jobs and not pods


async def test_gpu_reset_of_named_gpus_succeeds(
    executor: JobExecutor, hosts: Hosts, store: KubeStore
) -> None:
    result = await ActivityEnvironment().run(
        HostActivities(executor).reset_gpus, RESET.model_copy(update={"gpu_indices": [5, 3]})
    )
    assert result.status == "ok"
    assert result.command_id.startswith(f"job/{NS}/gpu-remediation-gpu-reset-")
    ((node, command),) = hosts.seen
    assert node == "gpu-1"
    assert command is not None
    assert command.argv() == [["nvidia-smi", "-r", "-i", "3"], ["nvidia-smi", "-r", "-i", "5"]]
    # Kept after its result was read, for a retry to read again; the TTL removes it.
    ((job,),) = [store.list_objects(JOBS, NS)[0]]
    assert job["spec"]["ttlSecondsAfterFinished"] == KEEP_FINISHED_S


async def test_gpu_reset_unsupported_is_a_typed_outcome(
    executor: JobExecutor, hosts: Hosts
) -> None:
    hosts.reset = HostResult(3, "", "Unknown Error")
    result = await ActivityEnvironment().run(
        HostActivities(executor).reset_gpus, RESET.model_copy(update={"gpu_indices": [0]})
    )
    assert result.status == "not_supported"


async def test_gpu_fallen_off_the_bus_is_a_typed_outcome(
    executor: JobExecutor, hosts: Hosts
) -> None:
    hosts.reset = HostResult(15)
    result = await ActivityEnvironment().run(HostActivities(executor).reset_gpus, RESET)
    assert result.status == "fallen_off_bus"


async def test_a_job_still_running_is_polled_through(
    store: KubeStore, api: Any, job_settings: Settings, hosts: Hosts
) -> None:
    executor = JobExecutor(client.BatchV1Api(api), client.CoreV1Api(api), job_settings)
    env = ActivityEnvironment()
    beats: list[Any] = []
    env.on_heartbeat = lambda *details: beats.append(details[0])
    with JobKubelet(store, hosts, start_delay=0.05, run_delay=0.1):
        result = await env.run(HostActivities(executor).reset_gpus, RESET)
    assert result.status == "ok"
    # Polled while Pending/Running, every heartbeat naming the Job and the command.
    assert len(beats) >= 3
    assert any(beat.get("pods") for beat in beats)
    assert all(beat["command"] == HostCommand(kind="gpu_reset").model_dump() for beat in beats)


async def test_dcgm_diag_failing_on_one_gpu_returns_evidence(
    executor: JobExecutor, hosts: Hosts
) -> None:
    # dcgmi's complaint on stderr lands in the same log, before the encoded result.
    hosts.diag = HostResult(
        226, encode_output(fixture("dcgm4_fail_gpu3.json")), "Error: diagnostic failed\n"
    )
    result = await ActivityEnvironment().run(HostActivities(executor).run_diagnostic, DIAG)
    assert not result.passed
    assert {f.gpu_index for f in result.failures} == {3}  # type: ignore[union-attr]
    assert [c.kind for _, c in hosts.seen if c is not None] == ["dcgm_diag", "dcgm_health"]


async def test_a_passing_diag_and_health_pass(executor: JobExecutor, store: KubeStore) -> None:
    result = await ActivityEnvironment().run(HostActivities(executor).run_diagnostic, DIAG)
    assert result.passed
    assert nothing_left(store)


async def test_the_efa_loopback_passes_a_healthy_node_and_names_a_degraded_port(
    executor: JobExecutor, hosts: Hosts, store: KubeStore
) -> None:
    healthy = await ActivityEnvironment().run(HostActivities(executor).run_efa_loopback, LOOPBACK)
    assert healthy.passed, healthy.summary
    assert healthy.failures == []
    # The simulated host's report of a node whose slow port (EFA_DEGRADED) loses packets.
    hosts.loopback = HostResult(0, simulated_loopback(FaultKind.EFA_DEGRADED))
    degraded = await ActivityEnvironment().run(HostActivities(executor).run_efa_loopback, LOOPBACK)
    assert not degraded.passed
    [failure] = degraded.failures
    assert isinstance(failure, EfaEvidence)
    assert (failure.check, failure.device) == ("loopback", "rdmap113s0")
    assert hosts.seen == [("gpu-1", HostCommand(kind="efa_loopback"))] * 2
    assert nothing_left(store)


async def test_truncated_diagnostic_output_is_an_error_never_a_pass(
    executor: JobExecutor, hosts: Hosts
) -> None:
    encoded = encode_output(fixture("dcgm4_pass.json"))
    hosts.diag = HostResult(0, encoded[: len(encoded) // 2])
    with pytest.raises(ApplicationError, match="unreadable") as err:
        await ActivityEnvironment().run(HostActivities(executor).run_diagnostic, DIAG)
    assert err.value.type == "DiagnosticUnreadable"


async def test_the_job_manifest(
    executor: JobExecutor, kubelet: JobKubelet, job_settings: Settings
) -> None:
    await ActivityEnvironment().run(
        HostActivities(executor).reset_gpus, RESET.model_copy(update={"gpu_indices": [1]})
    )
    ((job, command),) = kubelet.seen
    assert command == HostCommand(kind="gpu_reset", gpu_indices=[1])
    assert job["metadata"]["namespace"] == NS == job_settings.job_namespace
    assert job["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpu-remediation"
    spec = job["spec"]
    assert spec["backoffLimit"] == 0
    assert spec["activeDeadlineSeconds"] > 0
    pod = spec["template"]["spec"]
    assert pod["nodeName"] == "gpu-1"
    assert pod["restartPolicy"] == "Never"
    assert pod["tolerations"] == [{"operator": "Exists"}]
    (container,) = pod["containers"]
    assert container["securityContext"] == {"privileged": True}
    assert container["image"] == job_settings.job_image
    # Exactly the fixed script: nothing but validated integers from the input.
    assert container["command"] == ["/bin/sh", "-c", "\n".join(command.script())]
    assert "args" not in container
    assert "env" not in container


async def test_a_retried_activity_resumes_the_existing_job(
    executor: JobExecutor, kubelet: JobKubelet, store: KubeStore, kube: KubeApiServer, api: Any
) -> None:
    command = HostCommand(kind="gpu_reset")
    name = "gpu-remediation-gpu-reset-earlier0001"
    # The earlier attempt created the Job, then died while waiting for it.
    client.BatchV1Api(api).create_namespaced_job(NS, executor.job_manifest(name, "gpu-1", command))
    earlier = len(kube.requests())
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info, attempt=2, heartbeat_details=[{"job": name, "command": command.model_dump()}]
    )
    result = await env.run(HostActivities(executor).reset_gpus, RESET)
    assert result.status == "ok"
    assert result.command_id == f"job/{NS}/{name}"
    assert len(kubelet.seen) == 1  # one Job ran, the earlier attempt's
    assert not [r for r in kube.requests()[earlier:] if r.method == "POST"]


async def test_a_retry_whose_job_never_got_created_creates_it_under_that_name(
    executor: JobExecutor, kubelet: JobKubelet
) -> None:
    command = HostCommand(kind="gpu_reset")
    name = "gpu-remediation-gpu-reset-earlier0002"
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info, attempt=2, heartbeat_details=[{"job": name, "command": command.model_dump()}]
    )
    result = await env.run(HostActivities(executor).reset_gpus, RESET)
    assert result.command_id == f"job/{NS}/{name}"
    assert [job["metadata"]["name"] for job, _ in kubelet.seen] == [name]


async def test_a_retry_of_a_different_command_starts_afresh(
    executor: JobExecutor, kubelet: JobKubelet
) -> None:
    other = HostCommand(kind="gpu_reset", gpu_indices=[7])
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info, attempt=2, heartbeat_details=[{"job": "old", "command": other.model_dump()}]
    )
    await env.run(HostActivities(executor).reset_gpus, RESET)
    ((job, _),) = kubelet.seen
    assert job["metadata"]["name"] != "old"


async def test_a_job_that_fails_before_any_pod_runs_is_a_host_command_failure(
    executor: JobExecutor, hosts: Hosts, store: KubeStore
) -> None:
    hosts.reset = None
    with pytest.raises(ApplicationError, match="DeadlineExceeded") as err:
        await ActivityEnvironment().run(HostActivities(executor).reset_gpus, RESET)
    assert err.value.type == "HostCommandFailed"
    assert nothing_left(store)


async def test_json_looking_output_is_read_verbatim(executor: JobExecutor, hosts: Hosts) -> None:
    # The client's own log deserializer would turn this into a Python repr.
    hosts.reset = HostResult(4, '{"error": "In use by another client"}\n')
    result = await ActivityEnvironment().run(HostActivities(executor).reset_gpus, RESET)
    assert result.status == "failed"
    assert '{"error": "In use by another client"}' in result.detail


async def test_no_job_runs_on_another_machine_under_the_nodes_name(
    store: KubeStore, executor: JobExecutor, hosts: Hosts
) -> None:
    # Issue 35: the name came back as a new instance; the incident pinned the old one.
    store.put_node("gpu-1", provider_id="aws:///us-west-2a/i-0new")
    with pytest.raises(ApplicationError) as raised:
        await ActivityEnvironment().run(HostActivities(executor).reset_gpus, RESET)
    assert raised.value.type == "NodeReplaced"
    assert raised.value.non_retryable
    assert hosts.seen == []
    assert nothing_left(store)


async def test_a_job_log_at_the_read_limit_is_refused_not_read_whole(
    store: KubeStore, api: Any
) -> None:
    # The host is not trusted to keep its output small: the worker reads at most
    # MAX_LOG_BYTES (limitBytes) and refuses a log that reaches it.
    store.put_pod(NS, "pod-1", node_name="gpu-1")
    store.set_pod_log(NS, "pod-1", "x" * 5000, container="main")
    core = client.CoreV1Api(api)
    with pytest.raises(ApplicationError) as raised:
        await read_container_log(core, NS, "pod-1", "main", limit=1000)
    assert raised.value.type == "HostOutputTooLarge"
    assert await read_container_log(core, NS, "pod-1", "main", limit=5001) == "x" * 5000
    assert MAX_LOG_BYTES > MAX_ENCODED_OUTPUT  # a valid encoded result always fits
