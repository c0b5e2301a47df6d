"""The SSM executor runs the project's Command document with typed parameters, never a script."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.host import HostActivities
from activities.host_ssm import SsmExecutor
from gpu_remediation.contracts import ResetGpusInput, RunDiagnosticInput
from gpu_remediation.host_command import HOST_COMMAND_DOCUMENT
from gpu_remediation.settings import Settings
from simulator.aws import moto_cloud
from simulator.ssm_document import DOCUMENT_FILE, CommandDocument
from tests.activities.ssm_support import Hosts, provider_id, ssm_cloud


def sent_commands(ssm: Any, instance: str) -> list[dict[str, Any]]:
    # moto's backends outlive a cloud: only this test's instance's commands.
    commands = ssm.list_commands(InstanceId=instance)["Commands"]
    return sorted(commands, key=lambda c: c["RequestedDateTime"])


async def test_a_gpu_reset_sends_the_document_with_the_gpus_as_a_typed_parameter() -> None:
    with ssm_cloud() as (cloud, _hosts, executor):
        (instance,) = cloud.run_instances(1)
        await ActivityEnvironment().run(
            HostActivities(executor).reset_gpus,
            ResetGpusInput(
                node="gpu-1", incident_id="i", provider_id=provider_id(instance), gpu_indices=[5, 3]
            ),
        )
        [sent] = sent_commands(cloud.client("ssm"), instance)
    assert sent["DocumentName"] == HOST_COMMAND_DOCUMENT != "AWS-RunShellScript"
    assert sent["Parameters"] == {
        "action": ["gpu_reset"],
        "gpuIndices": ["3,5"],
        "executionTimeout": ["1800"],
    }


async def test_a_diagnostic_sends_its_level_and_the_health_check_no_gpus() -> None:
    with ssm_cloud() as (cloud, _hosts, executor):
        (instance,) = cloud.run_instances(1)
        await ActivityEnvironment().run(
            HostActivities(executor).run_diagnostic,
            RunDiagnosticInput(
                node="gpu-1", incident_id="i", provider_id=provider_id(instance), level=3
            ),
        )
        diag, health = sent_commands(cloud.client("ssm"), instance)
    assert {diag["DocumentName"], health["DocumentName"]} == {HOST_COMMAND_DOCUMENT}
    assert diag["Parameters"]["action"] == ["dcgm_diag"]
    assert diag["Parameters"]["diagLevel"] == ["3"]
    assert health["Parameters"]["action"] == ["dcgm_health"]
    assert "diagLevel" not in health["Parameters"]
    for sent in (diag, health):
        assert "commands" not in sent["Parameters"]


def test_the_document_name_is_a_setting_defaulting_to_the_shipped_one() -> None:
    assert Settings().ssm_document == HOST_COMMAND_DOCUMENT
    env = {"GPU_REMEDIATION_SSM_DOCUMENT": "Team-GpuHostCommand"}
    assert Settings.from_env(env).ssm_document == "Team-GpuHostCommand"
    with pytest.raises(ValueError, match="GPU_REMEDIATION_SSM_DOCUMENT"):
        Settings.from_env({"GPU_REMEDIATION_SSM_DOCUMENT": "x; reboot"})


async def test_the_executor_runs_the_document_named_by_the_setting() -> None:
    with moto_cloud(document_name="Team-GpuHostCommand") as cloud:
        hosts = Hosts()
        cloud.host_simulator = hosts
        executor = SsmExecutor(
            cloud.client("ssm"),
            document="Team-GpuHostCommand",
            poll_interval=timedelta(milliseconds=10),
        )
        (instance,) = cloud.run_instances(1)
        result = await ActivityEnvironment().run(
            HostActivities(executor).reset_gpus,
            ResetGpusInput(node="gpu-1", incident_id="i", provider_id=provider_id(instance)),
        )
    assert result.status == "ok"
    assert [command.kind for _, command in hosts.seen if command] == ["gpu_reset"]


async def test_parameters_the_document_refuses_are_a_non_retryable_invalid_input() -> None:
    # A document that allows level 1 only (an account that narrowed it further).
    shipped = json.loads(DOCUMENT_FILE.read_text())
    shipped["parameters"]["diagLevel"]["allowedValues"] = ["1"]
    [step] = shipped["mainSteps"]
    narrowed = CommandDocument(
        json.dumps(shipped), shipped["parameters"], step["inputs"]["runCommand"]
    )
    with moto_cloud(document=narrowed) as cloud:
        hosts = Hosts()
        cloud.host_simulator = hosts
        executor = SsmExecutor(cloud.client("ssm"), poll_interval=timedelta(milliseconds=10))
        (instance,) = cloud.run_instances(1)
        env = ActivityEnvironment()
        env.info = dataclasses.replace(env.info, attempt=1)
        with pytest.raises(ApplicationError, match="InvalidParameters") as err:
            await env.run(
                HostActivities(executor).run_diagnostic,
                RunDiagnosticInput(
                    node="gpu-1", incident_id="i", provider_id=provider_id(instance), level=2
                ),
            )
    assert err.value.type == "InvalidInput"
    assert err.value.non_retryable
    assert hosts.seen == []
