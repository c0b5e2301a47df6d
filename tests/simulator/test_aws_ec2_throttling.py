"""EC2 throttling through moto's adapter: the error EC2 answers, then the calls go through."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from simulator.aws import moto_cloud


def test_throttled_ec2_calls_answer_request_limit_exceeded_then_pass() -> None:
    with moto_cloud() as cloud:
        (instance,) = cloud.run_instances(1)
        ec2 = cloud.client("ec2", max_attempts=0, mode="standard")
        cloud.throttle_ec2 = 3

        for call in (
            lambda: ec2.reboot_instances(InstanceIds=[instance]),
            lambda: ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1),
            lambda: ec2.terminate_instances(InstanceIds=[instance]),
        ):
            with pytest.raises(ClientError) as err:
                call()
            assert err.value.response["Error"]["Code"] == "RequestLimitExceeded"

        ec2.reboot_instances(InstanceIds=[instance])
        assert cloud.ec2_throttled == ["RebootInstances", "RunInstances", "TerminateInstances"]
        # The throttled reboot reached no host; the one that passed did.
        assert cloud.rebooted == [instance]


def test_the_sdks_own_retries_ride_out_a_short_throttling_burst() -> None:
    with moto_cloud() as cloud:
        (instance,) = cloud.run_instances(1)
        cloud.throttle_ec2 = 2
        cloud.ec2_throttle_code = "ThrottlingException"

        cloud.client("ec2").reboot_instances(InstanceIds=[instance])  # adaptive, up to 5 retries

        assert cloud.ec2_throttled == ["RebootInstances", "RebootInstances"]
        assert cloud.rebooted == [instance]
