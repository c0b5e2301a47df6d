"""The moto adapter still works: fails when a moto upgrade changes what it relies on."""

import pytest
from botocore.exceptions import ClientError

from gpu_remediation.host_command import HOST_COMMAND_DOCUMENT, HostCommand
from simulator.aws import SimulatedInvocation, moto_cloud

HEALTH = HostCommand(kind="dcgm_health").ssm_parameters()


def test_ssm_invocations_report_what_the_simulated_host_did() -> None:
    seen: list[tuple[str, HostCommand | None]] = []

    def host(instance: str, command: HostCommand | None, script: list[str]) -> SimulatedInvocation:
        seen.append((instance, command))
        return SimulatedInvocation(
            status="Failed", exit_code=3, stdout="out", stderr="Unknown Error"
        )

    with moto_cloud() as cloud:
        cloud.host_simulator = host
        first, _second = cloud.run_instances(2)
        ssm = cloud.client("ssm")
        parameters = HostCommand(kind="gpu_reset", gpu_indices=[1]).ssm_parameters()
        sent = ssm.send_command(
            InstanceIds=[first], DocumentName=HOST_COMMAND_DOCUMENT, Parameters=parameters
        )
        command_id = sent["Command"]["CommandId"]
        invocation = ssm.get_command_invocation(CommandId=command_id, InstanceId=first)
        again = ssm.get_command_invocation(CommandId=command_id, InstanceId=first)
    assert invocation["Status"] == "Failed"
    assert invocation["ResponseCode"] == 3
    assert invocation["StandardOutputContent"] == "out"
    assert invocation["StandardErrorContent"] == "Unknown Error"
    assert again["ResponseCode"] == 3
    # Only the named instance ran it, once, and the document's parameters were recognised.
    assert seen == [(first, HostCommand(kind="gpu_reset", gpu_indices=[1]))]


def test_a_command_sent_to_one_instance_of_many_targets_only_that_one() -> None:
    # moto alone adds every instance of the account to a command sent without
    # Targets, and keeps an invocation for each: memory that grew with every command.
    with moto_cloud() as cloud:
        first, *_others = cloud.run_instances(5)
        ssm = cloud.client("ssm")
        sent = ssm.send_command(
            InstanceIds=[first],
            DocumentName=HOST_COMMAND_DOCUMENT,
            Parameters=HEALTH,
        )
        command_id = sent["Command"]["CommandId"]
        (listed,) = ssm.list_commands(CommandId=command_id)["Commands"]
    assert sent["Command"]["InstanceIds"] == [first]
    assert (listed["InstanceIds"], listed["TargetCount"], listed["Targets"]) == ([first], 1, [])


def test_invocations_can_be_invisible_then_in_progress() -> None:
    with moto_cloud() as cloud:
        cloud.host_simulator = lambda *_: SimulatedInvocation(
            invisible_polls=1, in_progress_polls=1
        )
        (instance,) = cloud.run_instances(1)
        ssm = cloud.client("ssm")
        sent = ssm.send_command(
            InstanceIds=[instance],
            DocumentName=HOST_COMMAND_DOCUMENT,
            Parameters=HEALTH,
        )
        command_id = sent["Command"]["CommandId"]
        with pytest.raises(ClientError, match="InvocationDoesNotExist"):
            ssm.get_command_invocation(CommandId=command_id, InstanceId=instance)
        assert (
            ssm.get_command_invocation(CommandId=command_id, InstanceId=instance)["Status"]
            == "InProgress"
        )
        assert (
            ssm.get_command_invocation(CommandId=command_id, InstanceId=instance)["Status"]
            == "Success"
        )


def test_ec2_reboots_reach_the_simulator() -> None:
    with moto_cloud() as cloud:
        rebooted: list[str] = []
        cloud.on_reboot = rebooted.append
        (instance,) = cloud.run_instances(1)
        cloud.client("ec2").reboot_instances(InstanceIds=[instance])
    assert rebooted == [instance]


def test_the_adapter_is_removed_on_exit() -> None:
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.ssm.models import ssm_backends

    with moto_cloud():
        backend = ssm_backends[DEFAULT_ACCOUNT_ID]["us-west-2"]
        assert "send_command" in vars(backend)
    assert "send_command" not in vars(backend)
