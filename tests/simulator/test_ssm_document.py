"""The simulated cloud runs the shipped SSM document, and only with parameters it allows."""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.exceptions import ClientError

from gpu_remediation.host_command import HOST_COMMAND_DOCUMENT, HostCommand
from simulator.aws import SimulatedInvocation, moto_cloud
from simulator.ssm_document import DOCUMENT_FILE, CommandDocument, check_document
from tests.deploy.support import DEPLOY

SHIPPED = json.loads((DEPLOY / "aws" / "gpu-remediation-host-command.json").read_text())


def test_the_simulator_creates_the_document_deploy_ships() -> None:
    assert DOCUMENT_FILE == DEPLOY / "aws" / "gpu-remediation-host-command.json"
    with moto_cloud() as cloud:
        stored = cloud.client("ssm").get_document(Name=HOST_COMMAND_DOCUMENT)
    assert json.loads(stored["Content"]) == SHIPPED
    assert stored["DocumentType"] == "Command"


def test_every_parameter_of_the_shipped_document_is_constrained() -> None:
    check_document(SHIPPED)
    parameters = SHIPPED["parameters"]
    assert parameters["action"]["allowedValues"] == [
        "gpu_reset",
        "dcgm_diag",
        "dcgm_health",
        "efa_loopback",
    ]
    assert parameters["diagLevel"]["allowedValues"] == ["1", "2", "3", "4"]
    [step] = SHIPPED["mainSteps"]
    assert step["action"] == "aws:runShellScript"
    # No parameter takes script text (AWS-RunShellScript's "commands").
    assert "commands" not in parameters


@pytest.mark.parametrize(
    "change",
    [
        {"type": "StringList"},
        {"allowedPattern": None, "allowedValues": None},
        {"allowedPattern": "[0-9,]*"},
    ],
)
def test_a_document_with_a_loose_parameter_is_refused(change: dict[str, Any]) -> None:
    loose = json.loads(json.dumps(SHIPPED))
    spec = loose["parameters"]["gpuIndices"]
    for key, value in change.items():
        if value is None:
            spec.pop(key, None)
        else:
            spec[key] = value
    with pytest.raises(ValueError, match="gpuIndices"):
        check_document(loose)


@pytest.mark.parametrize(
    ("parameters", "refused"),
    [
        ({"action": ["gpu_reset"], "gpuIndices": ["1;reboot"]}, "gpuIndices"),
        ({"action": ["gpu_reset"], "gpuIndices": ["$(reboot)"]}, "gpuIndices"),
        ({"action": ["gpu_reset"], "gpuIndices": ["1,2,"]}, "gpuIndices"),
        ({"action": ["gpu_reset"], "gpuIndices": ["64"]}, "gpuIndices"),
        ({"action": ["gpu_reset"], "gpuIndices": ["1\n2"]}, "gpuIndices"),
        ({"action": ["dcgm_diag"], "diagLevel": ["5"]}, "diagLevel"),
        ({"action": ["sh"]}, "action"),
        ({"gpuIndices": ["1"]}, "action"),
        ({"action": ["gpu_reset"], "commands": ["reboot"]}, "commands"),
        ({"action": ["gpu_reset", "dcgm_health"]}, "action"),
    ],
)
def test_parameters_the_document_does_not_allow_are_refused_before_anything_runs(
    parameters: dict[str, list[str]], refused: str
) -> None:
    ran: list[str] = []

    def host(instance: str, *_: object) -> SimulatedInvocation:
        ran.append(instance)
        return SimulatedInvocation()

    with moto_cloud() as cloud:
        cloud.host_simulator = host
        (instance,) = cloud.run_instances(1)
        ssm = cloud.client("ssm", max_attempts=0)
        with pytest.raises(ClientError, match=refused) as err:
            ssm.send_command(
                InstanceIds=[instance], DocumentName=HOST_COMMAND_DOCUMENT, Parameters=parameters
            )
        assert ssm.list_commands(InstanceId=instance)["Commands"] == []
    assert err.value.response["Error"]["Code"] == "InvalidParameters"
    assert ran == []


def test_aws_run_shell_script_is_refused_as_the_iam_policy_refuses_it() -> None:
    with moto_cloud() as cloud:
        (instance,) = cloud.run_instances(1)
        ssm = cloud.client("ssm", max_attempts=0)
        with pytest.raises(ClientError) as err:
            ssm.send_command(
                InstanceIds=[instance],
                DocumentName="AWS-RunShellScript",
                Parameters={"commands": ["nvidia-smi -r"]},
            )
    assert err.value.response["Error"]["Code"] == "AccessDeniedException"


@pytest.mark.parametrize(
    ("command", "lines"),
    [
        (HostCommand(kind="dcgm_diag", level=3, gpu_indices=[4, 1]), ["gpus='1,4'", "level='3'"]),
        (HostCommand(kind="efa_loopback"), ["action='efa_loopback'", "gpus=''"]),
    ],
)
def test_the_host_runs_the_command_the_parameters_name_with_the_script_rendered(
    command: HostCommand, lines: list[str]
) -> None:
    seen: list[tuple[HostCommand | None, list[str]]] = []

    def host(_instance: str, command: HostCommand | None, script: list[str]) -> Any:
        seen.append((command, script))
        return SimulatedInvocation()

    with moto_cloud() as cloud:
        cloud.host_simulator = host
        (instance,) = cloud.run_instances(1)
        ssm = cloud.client("ssm")
        sent = ssm.send_command(
            InstanceIds=[instance],
            DocumentName=HOST_COMMAND_DOCUMENT,
            Parameters=command.ssm_parameters(),
        )
        ssm.get_command_invocation(CommandId=sent["Command"]["CommandId"], InstanceId=instance)
    [(ran, script)] = seen
    assert ran is not None
    assert (ran.kind, ran.level) == (command.kind, command.level)
    assert ran.gpu_indices == sorted(set(command.gpu_indices))  # as the document sends them
    document = CommandDocument.load()
    values = document.resolve(command.ssm_parameters())
    assert script == document.render(values)
    assert set(lines) <= set(script)
    assert not any("{{" in line for line in script)
