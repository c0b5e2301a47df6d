"""AWS side effects: EC2 reboots and host commands through SSM Run Command.

Both clients are injected (boto3, adaptive retry mode, so throttling and 5xx
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

from activities.host_commands import CommandOutcome, HostCommand

_PROVIDER_ID = re.compile(r"^aws:///(?P<zone>[a-z]{2}(-[a-z]+)+-\d[a-z])/(?P<id>i-[0-9a-f]{8,17})$")

# SSM statuses after which an invocation will not change any more.
TERMINAL = {"Success", "Failed", "Cancelled", "TimedOut", "DeliveryTimedOut", "ExecutionTimedOut"}
PENDING = {"Pending", "InProgress", "Delayed", "Cancelling"}
POLL_INTERVAL = timedelta(seconds=2)
# Right after send_command the invocation may not exist yet; this long is normal.
INVISIBLE_GRACE = timedelta(seconds=60)


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


class SsmExecutor:
    """Runs the fixed host commands with ``AWS-RunShellScript``."""

    def __init__(
        self,
        ssm: Any,
        *,
        execution_timeout: timedelta = timedelta(minutes=30),
        poll_interval: timedelta = POLL_INTERVAL,
    ) -> None:
        """Bind to an SSM client.

        Args:
            ssm: A boto3 SSM client.
            execution_timeout: SSM's own limit for the command on the host.
            poll_interval: Time between ``get_command_invocation`` calls.
        """
        self._ssm = ssm
        self._execution_timeout = execution_timeout
        self._poll = poll_interval.total_seconds()

    async def run(self, node: str, provider_id: str, command: HostCommand) -> CommandOutcome:
        """Send the command and poll until it reaches a terminal status.

        The command id is heartbeated as soon as it exists: a retried activity
        resumes polling that command instead of running it twice.

        Raises:
            ApplicationError: ``HostCommandFailed`` when SSM reports a delivery or
                execution failure without an exit code of the command itself.
        """
        instance_id = instance_id_from_provider_id(provider_id)
        command_id = _resumable_command_id(command)
        if command_id is None:
            command_id = await self._send(node, instance_id, command)
        activity.heartbeat({"command_id": command_id, "command": command.model_dump()})
        return await self._wait(command_id, instance_id)

    async def _send(self, node: str, instance_id: str, command: HostCommand) -> str:
        try:
            response = await asyncio.to_thread(
                self._ssm.send_command,
                InstanceIds=[instance_id],
                DocumentName="AWS-RunShellScript",
                Comment=f"gpu-remediation {command.kind} on {node}"[:100],
                Parameters={
                    "commands": command.script(),
                    "executionTimeout": [str(int(self._execution_timeout.total_seconds()))],
                },
            )
        except ClientError as err:
            raise _client_error("SSM send_command", err) from err
        command_id: str = response["Command"]["CommandId"]
        return command_id

    async def _wait(self, command_id: str, instance_id: str) -> CommandOutcome:
        loop = asyncio.get_running_loop()
        invisible_until = loop.time() + INVISIBLE_GRACE.total_seconds()
        while True:
            try:
                invocation = await asyncio.to_thread(
                    self._ssm.get_command_invocation, CommandId=command_id, InstanceId=instance_id
                )
            except ClientError as err:
                code = err.response.get("Error", {}).get("Code", "")
                if code == "InvocationDoesNotExist" and loop.time() < invisible_until:
                    await asyncio.sleep(self._poll)
                    continue
                raise _client_error("SSM get_command_invocation", err) from err
            status = invocation.get("Status", "")
            activity.heartbeat({"command_id": command_id, "status": status})
            if status in PENDING:
                await asyncio.sleep(self._poll)
                continue
            return _outcome(command_id, invocation)


def _outcome(command_id: str, invocation: dict[str, Any]) -> CommandOutcome:
    status = invocation.get("Status", "")
    code = int(invocation.get("ResponseCode", -1))
    stdout = invocation.get("StandardOutputContent", "") or ""
    stderr = invocation.get("StandardErrorContent", "") or ""
    if status == "Success" or (status == "Failed" and code >= 0):
        # Failed with an exit code is the command's own answer (e.g. reset
        # not supported); the caller maps it.
        return CommandOutcome(command_id=command_id, exit_code=code, stdout=stdout, stderr=stderr)
    if status not in TERMINAL:
        raise ApplicationError(f"SSM command {command_id}: unexpected status {status!r}")
    details = invocation.get("StatusDetails", status)
    raise ApplicationError(
        f"SSM command {command_id} ended {status} ({details}): {stderr[:500]}",
        type="HostCommandFailed",
    )


def _resumable_command_id(command: HostCommand) -> str | None:
    """The command id this activity sent before a retry, if it was the same command."""
    info = activity.info()
    if info.attempt <= 1 or not info.heartbeat_details:
        return None
    details = info.heartbeat_details[0]
    if not isinstance(details, dict) or details.get("command") != command.model_dump():
        return None
    command_id = details.get("command_id")
    return command_id if isinstance(command_id, str) else None


def _client_error(call: str, err: ClientError | BotoCoreError) -> ApplicationError:
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
