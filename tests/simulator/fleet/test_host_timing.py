"""Host commands take their simulated duration: SSM reports InProgress until then."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta

from gpu_remediation.host_command import HOST_COMMAND_DOCUMENT, HostCommand, decode_output
from simulator.fleet import Durations, Fleet


def test_a_diagnostic_is_in_progress_for_its_scaled_duration(
    make_fleet: Callable[..., Fleet],
) -> None:
    # 60 simulated seconds at factor 60: one real second.
    fleet = make_fleet(time_factor=60, durations=Durations(diag_level_2=timedelta(seconds=60)))
    ssm = fleet.cloud.client("ssm")
    instance = fleet.nodes["h100-0000"].instance_id
    sent = ssm.send_command(
        InstanceIds=[instance],
        DocumentName=HOST_COMMAND_DOCUMENT,
        Parameters=HostCommand(kind="dcgm_diag", level=2).ssm_parameters(),
    )
    command_id = sent["Command"]["CommandId"]
    started = time.monotonic()
    statuses = []
    while True:
        invocation = ssm.get_command_invocation(CommandId=command_id, InstanceId=instance)
        statuses.append(invocation["Status"])
        if invocation["Status"] != "InProgress":
            break
        time.sleep(0.05)
    assert time.monotonic() - started >= 0.95
    assert statuses[0] == "InProgress"
    assert invocation["Status"] == "Success"
    assert '"DCGM Diagnostic"' in decode_output(invocation["StandardOutputContent"])


def test_a_command_to_a_host_that_is_down_times_out(fleet: Fleet) -> None:
    fleet.inject("host_hang", "p5-0000")
    ssm = fleet.cloud.client("ssm")
    instance = fleet.nodes["p5-0000"].instance_id
    sent = ssm.send_command(
        InstanceIds=[instance],
        DocumentName=HOST_COMMAND_DOCUMENT,
        Parameters=HostCommand(kind="dcgm_health").ssm_parameters(),
    )
    deadline = time.monotonic() + 5
    while True:
        invocation = ssm.get_command_invocation(
            CommandId=sent["Command"]["CommandId"], InstanceId=instance
        )
        if invocation["Status"] != "InProgress" or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert invocation["Status"] == "TimedOut"
    assert fleet.snapshot().counters["commands.unreachable"] == 1
