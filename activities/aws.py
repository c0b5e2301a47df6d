"""AWS side effects: EC2 reboots (host commands through SSM are ``activities.host_ssm``).

The client is injected (boto3, adaptive retry mode, so throttling and 5xx
are retried with client-side rate limiting before an error reaches the
activity). The instance id comes from the node's ``spec.providerID``, parsed
strictly: a malformed provider id is a non-retryable ``InvalidInput``.
"""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.kubernetes import node_ready, read_pinned_node
from activities.world_time import REAL_TIME, WorldTime
from gpu_remediation import contracts as c
from gpu_remediation.ids import Activities

_PROVIDER_ID = re.compile(r"^aws:///(?P<zone>[a-z]{2}(-[a-z]+)+-\d[a-z])/(?P<id>i-[0-9a-f]{8,17})$")


def instance_id_from_provider_id(provider_id: str) -> str:
    """Return the EC2 instance id of an EKS node's ``spec.providerID``.

    Raises:
        ApplicationError: ``InvalidInput`` (non-retryable) if the id is not an
            ``aws:///<zone>/i-<hex>`` provider id.
    """
    match = _PROVIDER_ID.fullmatch(provider_id)
    if match is None:
        raise ApplicationError(
            f"not an EC2 provider id: {provider_id!r}", type="InvalidInput", non_retryable=True
        )
    return match.group("id")


def client_error(call: str, err: ClientError | BotoCoreError) -> ApplicationError:
    """Map an AWS error after boto3's own retries to an activity error."""
    if isinstance(err, ClientError):
        code = err.response.get("Error", {}).get("Code", "")
        message = err.response.get("Error", {}).get("Message", str(err))
        invalid = code in {
            "InvalidInstanceId",
            "InvalidInstanceID.Malformed",
            "InvalidInstanceID.NotFound",
        }
        return ApplicationError(
            f"{call}: {code}: {message}",
            type="InvalidInput" if invalid else "AwsError",
            non_retryable=invalid,
        )
    return ApplicationError(f"{call}: {err}", type="AwsError")


class Ec2Activities:
    """Out-of-band host reboots through the EC2 API, confirmed through Kubernetes."""

    def __init__(
        self,
        ec2: Any,
        core_v1: Any,
        *,
        poll_interval: timedelta = timedelta(seconds=5),
        ambiguous_retry_wait: timedelta = timedelta(minutes=2),
        reissue_after: timedelta = timedelta(minutes=10),
        world: WorldTime = REAL_TIME,
    ) -> None:
        """Bind to the clients.

        Args:
            ec2: A boto3 EC2 client.
            core_v1: A ``kubernetes.client.CoreV1Api`` (reads the node's boot id).
            poll_interval: Time between node reads while waiting.
            ambiguous_retry_wait: On a retry that cannot tell whether the
                previous attempt issued the reboot, watch this long for a new
                boot id before issuing it.
            reissue_after: A reboot that has not shown a new boot id by then is
                issued once more (EC2 itself hard-reboots a host whose OS
                ignores the request after about 4 minutes).
            world: The timeline the waits run on (``activities.world_time``).
        """
        self._world = world
        self._ec2 = ec2
        self._core = core_v1
        self._poll = poll_interval.total_seconds()
        self._ambiguous_wait = ambiguous_retry_wait.total_seconds()
        self._reissue_after = reissue_after.total_seconds()

    @activity.defn(name=Activities.REBOOT_NODE)
    async def reboot_node(self, input: c.RebootNodeInput) -> c.RebootResult:
        """Reboot the node's instance and wait for a new boot id and Ready.

        Idempotent: ``input.boot_id_before`` is the boot id the workflow saw
        before deciding to reboot. If the node already shows another boot id
        (a retry after the reboot happened), nothing is rebooted again.

        Raises:
            ApplicationError: ``InvalidInput`` for a bad provider id,
                ``NodeNotFound`` when the node disappeared, ``RebootNotConfirmed``
                (retryable) when the timeout passed without a new boot id and Ready.
        """
        instance_id = instance_id_from_provider_id(input.provider_id)
        deadline = await self._world.now() + input.timeout_s
        boot_id, _ = await self._node_state(input.node, input.pin)
        if boot_id != input.boot_id_before:
            activity.logger.info(
                "%s already rebooted (%s -> %s)", input.node, input.boot_id_before, boot_id
            )
            boot_id = await self._wait_rebooted(
                input, deadline, issued_at=None, instance_id=instance_id
            )
            return c.RebootResult(boot_id_after=boot_id, rebooted_by_this_call=False)
        issued_at = _issued_at_from_heartbeat()
        if issued_at is None and activity.info().attempt > 1:
            # The previous attempt may have issued the reboot and died before
            # recording it: give the host time to go down before asking again.
            settle = min(await self._world.now() + self._ambiguous_wait, deadline)
            while await self._world.now() < settle:
                boot_id, _ = await self._node_state(input.node, input.pin)
                if boot_id != input.boot_id_before:
                    boot_id = await self._wait_rebooted(
                        input, deadline, issued_at=None, instance_id=instance_id
                    )
                    return c.RebootResult(boot_id_after=boot_id, rebooted_by_this_call=False)
                activity.heartbeat({"waiting": "ambiguous retry"})
                await self._world.sleep(self._poll)
        if issued_at is None:
            issued_at = await self._issue(instance_id)
        boot_id = await self._wait_rebooted(
            input, deadline, issued_at=issued_at, instance_id=instance_id
        )
        return c.RebootResult(boot_id_after=boot_id, rebooted_by_this_call=True)

    async def _issue(self, instance_id: str) -> float:
        try:
            await asyncio.to_thread(self._ec2.reboot_instances, InstanceIds=[instance_id])
        except ClientError as err:
            raise client_error("EC2 reboot_instances", err) from err
        issued_at = (await self._world.wall()).timestamp()
        activity.heartbeat({"reboot_issued_at": issued_at, "instance_id": instance_id})
        return issued_at

    async def _wait_rebooted(
        self,
        input: c.RebootNodeInput,
        deadline: float,
        *,
        issued_at: float | None,
        instance_id: str,
    ) -> str:
        reissued = False
        while True:
            boot_id, ready = await self._node_state(input.node, input.pin)
            if boot_id != input.boot_id_before and ready:
                return boot_id
            now = (await self._world.wall()).timestamp()
            if (
                issued_at is not None
                and not reissued
                and boot_id == input.boot_id_before
                and now - issued_at > self._reissue_after
            ):
                activity.logger.warning(
                    "%s: no new boot id after %.0fs, reissuing", input.node, now - issued_at
                )
                issued_at = await self._issue(instance_id)
                reissued = True
            activity.heartbeat({"reboot_issued_at": issued_at, "boot_id": boot_id, "ready": ready})
            if await self._world.now() >= deadline:
                raise ApplicationError(
                    f"{input.node}: reboot not confirmed within {input.timeout_s:.0f}s "
                    f"(boot id {boot_id}, ready {ready})",
                    type="RebootNotConfirmed",
                )
            await self._world.sleep(self._poll)

    async def _node_state(self, node: str, pin: c.NodePin | None) -> tuple[str, bool]:
        """The node's boot id and readiness; ``NodeReplaced`` if it is another machine."""
        obj = await read_pinned_node(self._core, node, pin)
        info = obj.status.node_info if obj.status else None
        return (info.boot_id if info else ""), node_ready(obj)


def _issued_at_from_heartbeat() -> float | None:
    """When an earlier attempt of this activity issued the reboot, if it recorded it."""
    details = activity.info().heartbeat_details
    if not details or not isinstance(details[0], dict):
        return None
    issued = details[0].get("reboot_issued_at")
    return float(issued) if isinstance(issued, (int, float)) else None
