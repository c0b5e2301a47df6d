"""GPU reset and diagnostics through SSM Run Command, over HTTP against moto."""

import dataclasses

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.host import HostActivities
from activities.host_commands import HostCommand, encode_output
from gpu_remediation.contracts import ResetGpusInput, RunDiagnosticInput, RunEfaLoopbackInput
from gpu_remediation.host_command import HOST_COMMAND_DOCUMENT
from gpu_remediation.models import EfaEvidence
from simulator.aws import SimulatedInvocation
from simulator.fleet.efa_loopback import loopback_report
from simulator.fleet.faults import FaultKind
from simulator.fleet.model import ActiveFault, NodeState
from tests.activities.ssm_support import Hosts, fixture, provider_id, ssm_cloud


def simulated_loopback(*faults: FaultKind) -> str:
    """What the fleet simulator's host prints for the EFA loopback on a p5 with ``faults``."""
    node = NodeState(
        name="gpu-1",
        pool="p5",
        instance_id="i-0abc",
        zone="us-west-2a",
        boot_id="b",
        reset_supported=False,
        gpus=8,
        agent_phase=0.0,
        created_at=0.0,
        faults=[
            ActiveFault(id=i, kind=kind, gpu=None, xid=None, since=0.0)
            for i, kind in enumerate(faults, 1)
        ],
    )
    return encode_output(loopback_report(node))


class WithLoopback:
    """``ssm_support``'s scripted hosts, answering the EFA loopback too (recorded in theirs)."""

    def __init__(self, hosts: Hosts) -> None:
        self.hosts = hosts
        self.loopback = SimulatedInvocation(stdout=simulated_loopback())

    def __call__(
        self, instance_id: str, command: HostCommand | None, script: list[str]
    ) -> SimulatedInvocation:
        if command is not None and command.kind == "efa_loopback":
            self.hosts.seen.append((instance_id, command))
            return self.loopback
        return self.hosts(instance_id, command, script)


async def test_gpu_reset_of_named_gpus_succeeds() -> None:
    with ssm_cloud() as (cloud, hosts, executor):
        (instance,) = cloud.run_instances(1)
        result = await ActivityEnvironment().run(
            HostActivities(executor).reset_gpus,
            ResetGpusInput(
                node="gpu-1", incident_id="i", provider_id=provider_id(instance), gpu_indices=[5, 3]
            ),
        )
    assert result.status == "ok"
    assert result.command_id
    (seen_instance, command), *_ = hosts.seen
    assert seen_instance == instance
    assert command is not None
    assert command.argv() == [["nvidia-smi", "-r", "-i", "3"], ["nvidia-smi", "-r", "-i", "5"]]


async def test_gpu_reset_unsupported_is_a_typed_outcome() -> None:
    with ssm_cloud() as (cloud, hosts, executor):
        (instance,) = cloud.run_instances(1)
        hosts.reset = SimulatedInvocation(status="Failed", exit_code=3, stderr="Unknown Error")
        result = await ActivityEnvironment().run(
            HostActivities(executor).reset_gpus,
            ResetGpusInput(
                node="gpu-1", incident_id="i", provider_id=provider_id(instance), gpu_indices=[0]
            ),
        )
    assert result.status == "not_supported"


async def test_gpu_fallen_off_the_bus_is_a_typed_outcome() -> None:
    with ssm_cloud() as (cloud, hosts, executor):
        (instance,) = cloud.run_instances(1)
        hosts.reset = SimulatedInvocation(status="Failed", exit_code=15)
        result = await ActivityEnvironment().run(
            HostActivities(executor).reset_gpus,
            ResetGpusInput(node="gpu-1", incident_id="i", provider_id=provider_id(instance)),
        )
    assert result.status == "fallen_off_bus"


async def test_invocation_not_yet_visible_and_in_progress_is_polled_through() -> None:
    with ssm_cloud() as (cloud, hosts, executor):
        (instance,) = cloud.run_instances(1)
        hosts.reset = SimulatedInvocation(invisible_polls=3, in_progress_polls=4)
        result = await ActivityEnvironment().run(
            HostActivities(executor).reset_gpus,
            ResetGpusInput(node="gpu-1", incident_id="i", provider_id=provider_id(instance)),
        )
    assert result.status == "ok"


async def test_dcgm_diag_failing_on_one_gpu_returns_evidence() -> None:
    with ssm_cloud() as (cloud, hosts, executor):
        (instance,) = cloud.run_instances(1)
        hosts.diag = SimulatedInvocation(
            status="Failed", exit_code=226, stdout=encode_output(fixture("dcgm4_fail_gpu3.json"))
        )
        result = await ActivityEnvironment().run(
            HostActivities(executor).run_diagnostic,
            RunDiagnosticInput(
                node="gpu-1", incident_id="i", provider_id=provider_id(instance), level=2
            ),
        )
    assert not result.passed
    assert {f.gpu_index for f in result.failures} == {3}  # type: ignore[union-attr]
    kinds = [c.kind for _, c in hosts.seen if c is not None]
    assert kinds == ["dcgm_diag", "dcgm_health"]


async def test_a_passing_diag_and_health_pass() -> None:
    with ssm_cloud() as (cloud, _hosts, executor):
        (instance,) = cloud.run_instances(1)
        result = await ActivityEnvironment().run(
            HostActivities(executor).run_diagnostic,
            RunDiagnosticInput(
                node="gpu-1", incident_id="i", provider_id=provider_id(instance), level=2
            ),
        )
    assert result.passed


async def test_the_efa_loopback_passes_a_healthy_node_and_names_a_degraded_port() -> None:
    with ssm_cloud() as (cloud, hosts, executor):
        cloud.host_simulator = answers = WithLoopback(hosts)
        (instance,) = cloud.run_instances(1)
        loopback = RunEfaLoopbackInput(
            node="gpu-1", incident_id="i", provider_id=provider_id(instance)
        )
        healthy = await ActivityEnvironment().run(
            HostActivities(executor).run_efa_loopback, loopback
        )
        # The simulated host's report of a node whose slow port (EFA_DEGRADED) loses packets.
        answers.loopback = SimulatedInvocation(stdout=simulated_loopback(FaultKind.EFA_DEGRADED))
        degraded = await ActivityEnvironment().run(
            HostActivities(executor).run_efa_loopback, loopback
        )
    assert healthy.passed, healthy.summary
    assert healthy.failures == []
    assert not degraded.passed
    [failure] = degraded.failures
    assert isinstance(failure, EfaEvidence)
    assert (failure.check, failure.device) == ("loopback", "rdmap113s0")
    assert hosts.seen == [(instance, HostCommand(kind="efa_loopback"))] * 2


async def test_truncated_diagnostic_output_is_an_error_never_a_pass() -> None:
    with ssm_cloud() as (cloud, hosts, executor):
        (instance,) = cloud.run_instances(1)
        encoded = encode_output(fixture("dcgm4_pass.json"))
        hosts.diag = SimulatedInvocation(stdout=encoded[: len(encoded) // 2])
        with pytest.raises(ApplicationError, match="unreadable") as err:
            await ActivityEnvironment().run(
                HostActivities(executor).run_diagnostic,
                RunDiagnosticInput(
                    node="gpu-1", incident_id="i", provider_id=provider_id(instance), level=2
                ),
            )
    assert err.value.type == "DiagnosticUnreadable"


async def test_ssm_timed_out_is_a_host_command_failure() -> None:
    with ssm_cloud() as (cloud, hosts, executor):
        (instance,) = cloud.run_instances(1)
        hosts.reset = SimulatedInvocation(status="TimedOut", exit_code=-1)
        with pytest.raises(ApplicationError, match="TimedOut") as err:
            await ActivityEnvironment().run(
                HostActivities(executor).reset_gpus,
                ResetGpusInput(node="gpu-1", incident_id="i", provider_id=provider_id(instance)),
            )
    assert err.value.type == "HostCommandFailed"


@pytest.mark.parametrize(
    "bad", ["", "i-0123456789abcdef0", "aws:///us-west-2a/i-XYZ", "gce://p/z/n"]
)
async def test_a_malformed_provider_id_is_invalid_input(bad: str) -> None:
    with ssm_cloud() as (_cloud, hosts, executor), pytest.raises(ApplicationError) as err:
        await ActivityEnvironment().run(
            HostActivities(executor).reset_gpus,
            ResetGpusInput(node="gpu-1", incident_id="i", provider_id=bad),
        )
    assert err.value.type == "InvalidInput"
    assert err.value.non_retryable
    assert hosts.seen == []


async def test_ssm_throttling_is_retried_by_the_client() -> None:
    with ssm_cloud() as (cloud, _hosts, executor):
        (instance,) = cloud.run_instances(1)
        cloud.throttle_send_command = 2
        result = await ActivityEnvironment().run(
            HostActivities(executor).reset_gpus,
            ResetGpusInput(node="gpu-1", incident_id="i", provider_id=provider_id(instance)),
        )
    assert result.status == "ok"
    assert cloud.throttle_send_command == 0


async def test_ssm_throttling_that_persists_surfaces_as_a_retryable_error() -> None:
    with ssm_cloud() as (cloud, hosts, executor):
        (instance,) = cloud.run_instances(1)
        cloud.throttle_send_command = 100
        with pytest.raises(ApplicationError, match="Throttling") as err:
            await ActivityEnvironment().run(
                HostActivities(executor).reset_gpus,
                ResetGpusInput(node="gpu-1", incident_id="i", provider_id=provider_id(instance)),
            )
    assert err.value.type == "AwsError"
    assert not err.value.non_retryable
    assert hosts.seen == []


async def test_a_retried_reset_resumes_the_command_it_already_sent() -> None:
    with ssm_cloud() as (cloud, hosts, executor):
        (instance,) = cloud.run_instances(1)
        command = HostCommand(kind="gpu_reset", gpu_indices=[2])
        sent = cloud.client("ssm").send_command(
            InstanceIds=[instance],
            DocumentName=HOST_COMMAND_DOCUMENT,
            Parameters=command.ssm_parameters(),
        )
        command_id = sent["Command"]["CommandId"]
        env = ActivityEnvironment()
        env.info = dataclasses.replace(
            env.info,
            attempt=2,
            heartbeat_details=[{"command_id": command_id, "command": command.model_dump()}],
        )
        result = await env.run(
            HostActivities(executor).reset_gpus,
            ResetGpusInput(
                node="gpu-1", incident_id="i", provider_id=provider_id(instance), gpu_indices=[2]
            ),
        )
    assert result.command_id == command_id
    assert len(hosts.seen) == 1  # the host ran it once: no second send
