"""How the fixed host commands run: the executor contract, its outcome, and resuming.

The commands themselves (model, script, tag line, output encoding) are in
``gpu_remediation.host_command``, shared with the fleet simulator; they are
re-exported here for the executors. Both executors (SSM and a Kubernetes Job)
run the same script, so the parsing of results is the same everywhere.
"""

from __future__ import annotations

from typing import Protocol

from temporalio import activity

from gpu_remediation.host_command import (
    ENCODED_MARKER,
    TAG,
    HostCommand,
    decode_output,
    encode_output,
    parse_tag,
)
from gpu_remediation.models import Model

__all__ = [
    "ENCODED_MARKER",
    "TAG",
    "CommandOutcome",
    "HostCommand",
    "HostCommandExecutor",
    "decode_output",
    "encode_output",
    "parse_tag",
    "resumable",
]


def resumable(command: HostCommand, key: str) -> str | None:
    """The handle (command id, Job name) an earlier attempt recorded for ``command``.

    Executors heartbeat ``{key: handle, "command": command}`` as soon as the
    handle exists, so a retried activity resumes that run instead of starting
    the command a second time.
    """
    info = activity.info()
    if info.attempt <= 1 or not info.heartbeat_details:
        return None
    details = info.heartbeat_details[0]
    if not isinstance(details, dict) or details.get("command") != command.model_dump():
        return None
    handle = details.get(key)
    return handle if isinstance(handle, str) else None


class CommandOutcome(Model):
    """How a host command ended."""

    command_id: str
    exit_code: int
    stdout: str = ""
    stderr: str = ""


class HostCommandExecutor(Protocol):
    """Runs a fixed host command on a node and waits for its end."""

    async def run(self, node: str, provider_id: str, command: HostCommand) -> CommandOutcome:
        """Run ``command`` on ``node``; raise an ApplicationError when it cannot."""
        ...
