"""A retried host command whose heartbeat never reached Temporal finds its command in SSM.

Found by ``remediate demo --chaos``: the Temporal server restarted while a GPU
reset ran; the heartbeat naming the SSM command was lost with it, the retry had
no command id to resume, and the node got ``nvidia-smi -r`` twice for one decision.
"""

import dataclasses

from temporalio.testing import ActivityEnvironment

from activities.host import HostActivities
from gpu_remediation.contracts import ResetGpusInput
from tests.activities.ssm_support import provider_id, ssm_cloud


def _reset(instance: str) -> ResetGpusInput:
    return ResetGpusInput(
        node="gpu-1", incident_id="i", provider_id=provider_id(instance), gpu_indices=[2]
    )


async def test_a_retry_without_the_heartbeat_resumes_the_command_its_first_attempt_sent() -> None:
    with ssm_cloud() as (cloud, hosts, executor):
        (instance,) = cloud.run_instances(1)
        first = await ActivityEnvironment().run(
            HostActivities(executor).reset_gpus, _reset(instance)
        )
        retry = ActivityEnvironment()
        # The same activity, attempt 2, and Temporal has no heartbeat of attempt 1.
        retry.info = dataclasses.replace(retry.info, attempt=2, heartbeat_details=[])

        again = await retry.run(HostActivities(executor).reset_gpus, _reset(instance))

        commands = cloud.client("ssm").list_commands(InstanceId=instance)["Commands"]
    assert again.command_id == first.command_id
    assert len(commands) == 1
    assert len(hosts.seen) == 1  # the host reset its GPU once


async def test_another_activity_on_the_same_node_sends_its_own_command() -> None:
    with ssm_cloud() as (cloud, hosts, executor):
        (instance,) = cloud.run_instances(1)
        first = await ActivityEnvironment().run(
            HostActivities(executor).reset_gpus, _reset(instance)
        )
        other = ActivityEnvironment()
        other.info = dataclasses.replace(
            other.info, activity_id="another-decision", attempt=2, heartbeat_details=[]
        )

        second = await other.run(HostActivities(executor).reset_gpus, _reset(instance))

    assert second.command_id != first.command_id
    assert len(hosts.seen) == 2
