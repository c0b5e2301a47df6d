"""Host commands through SSM Run Command, as the project's own Command document.

The worker never sends shell text: it runs the document
``deploy/aws/gpu-remediation-host-command.json`` (its name is the
``ssm_document`` setting) with typed parameters only (an action from a fixed
list, the GPU indices and the diag level), which SSM checks against the
document's ``allowedValues``/``allowedPattern`` before anything runs. The
worker's IAM policy (``deploy/aws/iam-policy.json``) allows ``SendCommand``
with that document only, on the cluster's GPU instances only (a tag condition).

A retried activity never runs the command twice: the command id is
heartbeated as soon as it exists, and when the heartbeat never reached
Temporal the command is found again in SSM by its unique comment.
"""

from __future__ import annotations

import asyncio
import hashlib
from datetime import timedelta
from typing import Any

from botocore.exceptions import ClientError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.aws import client_error, instance_id_from_provider_id
from activities.host_commands import CommandOutcome, HostCommand, resumable
from activities.world_time import REAL_TIME, WorldTime
from gpu_remediation.host_command import DOCUMENT_TIMEOUT, HOST_COMMAND_DOCUMENT

# SSM statuses after which an invocation will not change any more.
TERMINAL = {"Success", "Failed", "Cancelled", "TimedOut", "DeliveryTimedOut", "ExecutionTimedOut"}
PENDING = {"Pending", "InProgress", "Delayed", "Cancelling"}
POLL_INTERVAL = timedelta(seconds=2)
# Right after send_command the invocation may not exist yet; this long is normal.
INVISIBLE_GRACE = timedelta(seconds=60)


class SsmExecutor:
    """Runs the fixed host commands with the project's SSM Command document."""

    def __init__(
        self,
        ssm: Any,
        *,
        document: str = HOST_COMMAND_DOCUMENT,
        execution_timeout: timedelta = timedelta(minutes=30),
        poll_interval: timedelta = POLL_INTERVAL,
        world: WorldTime = REAL_TIME,
    ) -> None:
        """Bind to an SSM client.

        Args:
            ssm: A boto3 SSM client.
            document: Name of the Command document (the ``ssm_document`` setting).
            execution_timeout: SSM's own limit for the command on the host.
            poll_interval: Time between ``get_command_invocation`` calls.
            world: The timeline the polls run on (``activities.world_time``).
        """
        self._world = world
        self._ssm = ssm
        self._document = document
        self._execution_timeout = execution_timeout
        self._poll = poll_interval.total_seconds()

    async def run(self, node: str, provider_id: str, command: HostCommand) -> CommandOutcome:
        """Send the command and poll until it reaches a terminal status.

        The command id is heartbeated as soon as it exists: a retried activity
        resumes polling that command instead of running it twice.

        Raises:
            ApplicationError: ``HostCommandFailed`` when SSM reports a delivery or
                execution failure without an exit code of the command itself;
                ``InvalidInput`` (non-retryable) for a bad provider id or
                parameters the document refuses.
        """
        instance_id = instance_id_from_provider_id(provider_id)
        comment = _comment(node, command)
        command_id = resumable(command, "command_id")
        if command_id is None and activity.info().attempt > 1:
            # The heartbeat naming the command may never have reached Temporal (a server
            # restart, found by `remediate demo --chaos`): look for it in SSM itself.
            command_id = await self._sent_before(instance_id, comment)
        if command_id is None:
            command_id = await self._send(instance_id, command, comment)
        activity.heartbeat({"command_id": command_id, "command": command.model_dump()})
        return await self._wait(command_id, instance_id, command)

    async def _sent_before(self, instance_id: str, comment: str) -> str | None:
        """The command an earlier attempt of this activity sent (its comment is unique)."""
        since = activity.info().scheduled_time - timedelta(minutes=1)
        token: str | None = None
        try:
            while True:
                page = await asyncio.to_thread(
                    self._ssm.list_commands,
                    InstanceId=instance_id,
                    Filters=[
                        {"key": "InvokedAfter", "value": since.strftime("%Y-%m-%dT%H:%M:%SZ")}
                    ],
                    **({"NextToken": token} if token else {}),
                )
                for sent in page.get("Commands", []):
                    if sent.get("Comment") == comment:
                        return str(sent["CommandId"])
                token = page.get("NextToken")
                if not token:
                    return None
        except ClientError as err:
            raise client_error("SSM list_commands", err) from err

    async def _send(self, instance_id: str, command: HostCommand, comment: str) -> str:
        parameters = {
            **command.ssm_parameters(),
            DOCUMENT_TIMEOUT: [str(int(self._execution_timeout.total_seconds()))],
        }
        try:
            response = await asyncio.to_thread(
                self._ssm.send_command,
                InstanceIds=[instance_id],
                DocumentName=self._document,
                Comment=comment,
                Parameters=parameters,
            )
        except ClientError as err:
            code = err.response.get("Error", {}).get("Code", "")
            if code in {"InvalidParameters", "InvalidDocument"}:
                # The document refused what was sent: a retry would be refused again.
                raise ApplicationError(
                    f"SSM send_command ({self._document}): {code}: "
                    f"{err.response.get('Error', {}).get('Message', '')}",
                    type="InvalidInput",
                    non_retryable=True,
                ) from err
            raise client_error("SSM send_command", err) from err
        command_id: str = response["Command"]["CommandId"]
        return command_id

    async def _wait(
        self, command_id: str, instance_id: str, command: HostCommand
    ) -> CommandOutcome:
        invisible_until = await self._world.now() + INVISIBLE_GRACE.total_seconds()
        while True:
            try:
                invocation = await asyncio.to_thread(
                    self._ssm.get_command_invocation, CommandId=command_id, InstanceId=instance_id
                )
            except ClientError as err:
                code = err.response.get("Error", {}).get("Code", "")
                if code == "InvocationDoesNotExist" and await self._world.now() < invisible_until:
                    await self._world.sleep(self._poll)
                    continue
                raise client_error("SSM get_command_invocation", err) from err
            status = invocation.get("Status", "")
            # Every heartbeat carries the command: the last one is what a retry reads.
            activity.heartbeat(
                {"command_id": command_id, "command": command.model_dump(), "status": status}
            )
            if status in PENDING:
                await self._world.sleep(self._poll)
                continue
            return _outcome(command_id, invocation)


def _comment(node: str, command: HostCommand) -> str:
    """The command's SSM comment, ``gpu-remediation <kind> on <node> [<tag>]``.

    The tag is the same for every attempt of one activity and differs between
    activities, so a retry can find the command an earlier attempt sent.
    """
    info = activity.info()
    key = f"{info.workflow_id}/{info.workflow_run_id}/{info.activity_id}"
    tag = hashlib.sha256(key.encode()).hexdigest()[:12]
    return f"gpu-remediation {command.kind} on {node}"[:85] + f" [{tag}]"


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
