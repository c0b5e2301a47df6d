"""AWS for tests and the simulator: moto's server, plus one contained adapter.

moto serves EC2 and SSM over real HTTP, so the project's boto3 code runs
unchanged against it. But moto executes nothing: every SSM invocation reports
Success with empty output, and an EC2 reboot changes nothing a node could
notice. This module is the one place that teaches moto more, by overriding
two methods on moto's in-process backend objects (never the boto3 clients):

* ``send_command`` runs only the project's own Command document
  (``deploy/aws/gpu-remediation-host-command.json``, created in moto at start
  from that file): another document is refused with ``AccessDeniedException``,
  as the worker's IAM policy refuses it, and parameters the document does not
  allow with ``InvalidParameters``, as SSM does (``simulator.ssm_document``).
  It asks a ``HostSimulator`` for each targeted instance's result, and can
  keep the invocation invisible (``InvocationDoesNotExist``) or ``InProgress``
  for a number of polls or seconds, as real SSM does;
* ``reboot_instances`` tells the simulator which instances were rebooted;
* ``run_instances``, ``terminate_instances`` and ``reboot_instances`` can answer
  EC2's throttling error (``RequestLimitExceeded``, or another code such as
  ``ThrottlingException``) for a number of calls, as EC2 does when an account's
  request rate is exceeded (chaos runs: ``throttle_ec2``).

``tests/simulator/test_aws_adapter.py`` fails if a moto upgrade changes the
internals relied on here.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.config import Config
from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.models import ec2_backends
from moto.server import ThreadedMotoServer
from moto.ssm.exceptions import SSMException
from moto.ssm.models import ssm_backends

from gpu_remediation.host_command import HOST_COMMAND_DOCUMENT, HostCommand
from simulator.ssm_document import CommandDocument, InvalidParameters

DEFAULT_REGION = "us-west-2"


@dataclass
class SimulatedInvocation:
    """What one SSM invocation reports, and when."""

    status: str = "Success"
    exit_code: int = 0
    stdout: str = ""
    stderr: str = ""
    invisible_polls: int = 0
    in_progress_polls: int = 0
    in_progress_seconds: float = 0.0
    """Then InProgress until this many seconds (of the cloud's ``clock``) after the host ran it."""


HostSimulator = Callable[[str, HostCommand | None, list[str]], SimulatedInvocation]
"""(instance id, the command the parameters name or None, the rendered script lines)
-> the invocation's result."""


def _succeed(
    _instance: str, _command: HostCommand | None, _script: list[str]
) -> SimulatedInvocation:
    return SimulatedInvocation()


@dataclass
class _CommandState:
    targets: list[str]
    command: HostCommand | None
    script: list[str]
    results: dict[str, SimulatedInvocation] = field(default_factory=dict)
    polls: dict[str, int] = field(default_factory=dict)
    ran_at: dict[str, float] = field(default_factory=dict)


class MotoCloud:
    """A moto server on a free loopback port with the SSM/EC2 adapter installed."""

    def __init__(
        self,
        region: str = DEFAULT_REGION,
        *,
        document: CommandDocument | None = None,
        document_name: str = HOST_COMMAND_DOCUMENT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Prepare (not start) the cloud.

        Args:
            region: Region of the clients and backends.
            document: The host-command document (default: the file deploy/ ships).
            document_name: The name it is created under (the ``ssm_document`` setting).
            clock: Seconds on the timeline commands run in: real by default, the
                fleet's simulated time in the fleet simulator.
        """
        self._clock = clock
        self.region = region
        self.document = document if document is not None else CommandDocument.load()
        self.document_name = document_name
        self.host_simulator: HostSimulator = _succeed
        self.on_reboot: Callable[[str], None] = lambda _instance: None
        self.rebooted: list[str] = []
        self.throttle_send_command = 0
        """How many coming ``SendCommand`` calls answer ``ThrottlingException``."""
        self.throttle_ec2 = 0
        """How many coming EC2 Run/Terminate/RebootInstances calls are throttled."""
        self.ec2_throttle_code = "RequestLimitExceeded"
        """The error code they answer (EC2's own; ``ThrottlingException`` is the generic one)."""
        self.ec2_throttled: list[str] = []
        """The operations that were throttled, in order."""
        self._commands: dict[str, _CommandState] = {}
        self._lock = threading.Lock()
        self._server: ThreadedMotoServer | None = None
        self._restore: list[Callable[[], None]] = []
        self.endpoint_url = ""

    def start(self) -> None:
        """Start the server and install the adapter."""
        port = _free_port()
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        self._server.start()
        self.endpoint_url = f"http://127.0.0.1:{port}"
        self._install()
        self._create_document()

    def _create_document(self) -> None:
        """Create the host-command document through the API, as an operator does."""
        ssm = self.client("ssm")
        with suppress(ssm.exceptions.InvalidDocument):
            # moto's backends outlive a server: a document of an earlier cloud goes.
            ssm.delete_document(Name=self.document_name)
        ssm.create_document(
            Content=self.document.content,
            Name=self.document_name,
            DocumentType="Command",
            DocumentFormat="JSON",
        )

    def stop(self) -> None:
        """Remove the adapter and stop the server."""
        for restore in reversed(self._restore):
            restore()
        self._restore.clear()
        if self._server is not None:
            self._server.stop()
            self._server = None

    def client(self, service: str, *, max_attempts: int = 5, mode: str = "adaptive") -> Any:
        """A boto3 client of ``service`` talking to this server over HTTP.

        Args:
            service: ``ec2``, ``ssm``, ...
            max_attempts: botocore's retries after a call's first attempt (0: none).
            mode: botocore's retry mode (``adaptive`` also rate-limits after throttling).
        """
        return boto3.client(
            service,
            region_name=self.region,
            endpoint_url=self.endpoint_url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            config=Config(retries={"mode": mode, "max_attempts": max_attempts}),
        )

    def run_instances(self, count: int, instance_type: str = "p5.48xlarge") -> list[str]:
        """Launch instances (through the API) and return their ids."""
        ec2 = self.client("ec2")
        reservation = ec2.run_instances(
            ImageId="ami-12c6146b", MinCount=count, MaxCount=count, InstanceType=instance_type
        )
        return [instance["InstanceId"] for instance in reservation["Instances"]]

    # -------------------------------------------------------------- adapter

    def _install(self) -> None:
        ssm = ssm_backends[DEFAULT_ACCOUNT_ID][self.region]
        ec2 = ec2_backends[DEFAULT_ACCOUNT_ID][self.region]
        original_send = ssm.send_command
        original_get = ssm.get_command_invocation
        original_reboot = ec2.reboot_instances
        original_run = ec2.run_instances
        original_terminate = ec2.terminate_instances

        def throttle_ec2_call(operation: str) -> None:
            with self._lock:
                throttled = self.throttle_ec2 > 0
                self.throttle_ec2 -= 1 if throttled else 0
                if throttled:
                    self.ec2_throttled.append(operation)
            if throttled:
                raise EC2ClientError(self.ec2_throttle_code, "Request limit exceeded.")

        def run_instances(*args: Any, **kwargs: Any) -> Any:
            throttle_ec2_call("RunInstances")
            return original_run(*args, **kwargs)

        def terminate_instances(instance_ids: list[str]) -> Any:
            throttle_ec2_call("TerminateInstances")
            return original_terminate(instance_ids)

        def send_command(**kwargs: Any) -> Any:
            with self._lock:
                throttled = self.throttle_send_command > 0
                self.throttle_send_command -= 1 if throttled else 0
            if throttled:
                raise SSMException("ThrottlingException", "Rate exceeded")
            document = kwargs.get("document_name")
            if document != self.document_name:
                # deploy/aws/iam-policy.json allows SendCommand with this document only.
                raise SSMException(
                    "AccessDeniedException",
                    f"not authorized to perform ssm:SendCommand on document/{document}",
                )
            try:
                values = self.document.resolve(kwargs.get("parameters"))
            except InvalidParameters as err:
                raise SSMException("InvalidParameters", str(err)) from err
            named = list(kwargs.get("instance_ids") or [])
            if named and not kwargs.get("targets"):
                # Without Targets moto adds every instance of the account to the
                # command (an invocation each, kept forever: about 1.5 MB per command
                # at 1,000 nodes, most of a 10x comparison's memory); a filter of the
                # named instances keeps it to them, as SSM does.
                kwargs["targets"] = [{"Key": "instance-id", "Values": named}]
            command = original_send(**kwargs)
            command.targets = []  # the caller sent none; responses say so
            command.target_count = command.completed_count = len(command.instance_ids)
            # moto may build a response more than once per request, so the host
            # runs the command on the first poll of the id the client got, once.
            state = _CommandState(named, _command(values), self.document.render(values))
            with self._lock:
                self._commands[command.command_id] = state
            return command

        def get_command_invocation(
            command_id: str, instance_id: str, plugin_name: str | None
        ) -> Any:
            invocation = dict(original_get(command_id, instance_id, plugin_name))
            with self._lock:
                state = self._commands.get(command_id)
                if state is None or instance_id not in state.targets:
                    return invocation
                if instance_id not in state.results:
                    state.results[instance_id] = self.host_simulator(
                        instance_id, state.command, state.script
                    )
                    state.ran_at[instance_id] = self._clock()
                result = state.results[instance_id]
                polls = state.polls.get(instance_id, 0) + 1
                state.polls[instance_id] = polls
                running = self._clock() - state.ran_at[instance_id] < result.in_progress_seconds
            if polls <= result.invisible_polls:
                raise SSMException(
                    "InvocationDoesNotExist",
                    "An error occurred (InvocationDoesNotExist) when calling the "
                    "GetCommandInvocation operation",
                )
            if polls <= result.invisible_polls + result.in_progress_polls or running:
                invocation.update(Status="InProgress", StatusDetails="InProgress", ResponseCode=-1)
                return invocation
            invocation.update(
                Status=result.status,
                StatusDetails=result.status,
                ResponseCode=result.exit_code,
                StandardOutputContent=result.stdout[:24000],
                StandardErrorContent=result.stderr[:8000],
            )
            return invocation

        def reboot_instances(instance_ids: list[str]) -> Any:
            throttle_ec2_call("RebootInstances")
            rebooted = original_reboot(instance_ids)
            for instance in rebooted:
                self.rebooted.append(instance.id)
                self.on_reboot(instance.id)
            return rebooted

        # Instance attributes shadow the backends' methods for this cloud only;
        # the restore list deletes them again.
        ssm.send_command = send_command  # type: ignore[method-assign,assignment]
        ssm.get_command_invocation = get_command_invocation  # type: ignore[method-assign]
        ec2.reboot_instances = reboot_instances  # type: ignore[method-assign]
        ec2.run_instances = run_instances  # type: ignore[method-assign]
        ec2.terminate_instances = terminate_instances  # type: ignore[method-assign]
        self._restore += [
            lambda: delattr(ssm, "send_command"),
            lambda: delattr(ssm, "get_command_invocation"),
            lambda: delattr(ec2, "reboot_instances"),
            lambda: delattr(ec2, "run_instances"),
            lambda: delattr(ec2, "terminate_instances"),
        ]


def _command(values: dict[str, str]) -> HostCommand | None:
    """The command a document invocation runs; None when the values make none."""
    try:
        return HostCommand.from_ssm_parameters({k: [v] for k, v in values.items()})
    except ValueError:
        return None


@contextmanager
def moto_cloud(
    region: str = DEFAULT_REGION,
    *,
    document: CommandDocument | None = None,
    document_name: str = HOST_COMMAND_DOCUMENT,
) -> Iterator[MotoCloud]:
    """Run a ``MotoCloud`` for the duration of a ``with`` block (arguments: ``MotoCloud``)."""
    cloud = MotoCloud(region, document=document, document_name=document_name)
    cloud.start()
    try:
        yield cloud
    finally:
        cloud.stop()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
