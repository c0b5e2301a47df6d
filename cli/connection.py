"""Connecting the operator commands to Temporal, and naming what went wrong.

Settings come from the command line first, then from ``temporalio.envconfig``
(``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``, ``TEMPORAL_API_KEY``,
``TEMPORAL_TLS*``, ``TEMPORAL_PROFILE`` and its TOML file), then
``localhost:7233``. Connecting is bounded by a short timeout so an unreachable
server fails the command in seconds with exit code 3, and every later RPC
error is turned into one clear line instead of a traceback.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from cryptography import x509
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client, RetryConfig
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.envconfig import ClientConfigProfile, ClientConfigTLS
from temporalio.service import RPCError, RPCStatusCode

from cli.output import CliError, ExitCode
from gpu_remediation.ids import node_workflow_id, node_workflow_id_prefix
from triggers.starter import TemporalUnavailableError

T = TypeVar("T")

DEFAULT_ADDRESS = "localhost:7233"
CONNECT_TIMEOUT = timedelta(seconds=5)
DEFAULT_CLUSTER = "default"

# Statuses that mean the server (or the path to it) is not there right now.
UNAVAILABLE = frozenset(
    {RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED}
)

_PANEL = "Temporal"

AddressOption = Annotated[
    str | None,
    typer.Option(
        "--address",
        help="Temporal frontend host:port (default: TEMPORAL_ADDRESS, the envconfig profile, "
        f"or {DEFAULT_ADDRESS}).",
        rich_help_panel=_PANEL,
        show_default=False,
    ),
]
NamespaceOption = Annotated[
    str | None,
    typer.Option(
        "--namespace",
        help="Temporal namespace (default: TEMPORAL_NAMESPACE, the profile, or default).",
        rich_help_panel=_PANEL,
        show_default=False,
    ),
]
ClusterOption = Annotated[
    str,
    typer.Option(
        "--cluster",
        envvar="GPU_REMEDIATION_CLUSTER",
        help="Cluster name (part of every node's workflow id), as the triggers use it.",
        rich_help_panel=_PANEL,
    ),
]
TimeoutOption = Annotated[
    float,
    typer.Option(
        "--timeout",
        min=0.1,
        help="Seconds to wait for a worker to answer a query or an update.",
        rich_help_panel=_PANEL,
    ),
]
DEFAULT_TIMEOUT = 30.0


@dataclass(frozen=True)
class TemporalOptions:
    """Where Temporal is, as given on the command line (None: from the environment)."""

    address: str | None = None
    namespace: str | None = None
    connect_timeout: timedelta = CONNECT_TIMEOUT

    def profile(self) -> ClientConfigProfile:
        """The envconfig profile with the command line's overrides and defaults applied.

        Raises:
            CliError: Exit code 2 if the environment's Temporal settings are invalid.
        """
        try:
            profile = ClientConfigProfile.load()
        except Exception as err:  # envconfig raises plain errors for bad TOML/values
            raise CliError(
                f"invalid Temporal client settings (TEMPORAL_* / profile): {err}",
                ExitCode.INVALID_INPUT,
            ) from err
        return dataclasses.replace(
            profile,
            address=self.address or profile.address or DEFAULT_ADDRESS,
            namespace=self.namespace or profile.namespace or "default",
        )

    def principal(self) -> str | None:
        """The identity this connection authenticates as, when the client can know it.

        With mTLS that is the client certificate's subject (the server refuses
        a connection whose certificate it does not trust). An API key's
        principal is known to the server only, so it gives None, as does a
        connection with no credentials.

        Raises:
            CliError: Exit code 2 if the client certificate cannot be read.
        """
        tls = self.profile().tls
        source = tls.client_cert if isinstance(tls, ClientConfigTLS) else None
        if source is None:
            return None
        try:
            pem = source.read_bytes() if isinstance(source, Path) else _as_bytes(source)
            cert = x509.load_pem_x509_certificate(pem)
        except (OSError, ValueError) as err:
            raise CliError(
                f"cannot read the TLS client certificate: {err}", ExitCode.INVALID_INPUT
            ) from err
        return f"mTLS {cert.subject.rfc4514_string()}"[:256]

    async def connect(self) -> Client:
        """Connect with the pydantic data converter and check the namespace exists.

        Raises:
            CliError: Exit code 3 if the server cannot be reached or has no such
                namespace, 2 if the address is malformed.
        """
        profile = self.profile()
        address, namespace = profile.address or DEFAULT_ADDRESS, profile.namespace or "default"
        config = profile.to_client_connect_config()
        try:
            client = await Client.connect(
                **config,
                data_converter=pydantic_data_converter,
                connect_timeout=self.connect_timeout,
                # An operator at a terminal wants an answer, not minutes of retries.
                retry_config=RetryConfig(max_retries=3, max_interval_millis=2000),
            )
        except ValueError as err:
            raise CliError(
                f"invalid Temporal address {address!r}: {err}", ExitCode.INVALID_INPUT
            ) from err
        except RuntimeError as err:
            raise CliError(
                f"Temporal unreachable at {address}: {err}", ExitCode.UNREACHABLE
            ) from err
        try:
            await client.workflow_service.describe_namespace(
                DescribeNamespaceRequest(namespace=namespace),
                timeout=self.connect_timeout,
            )
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise CliError(
                    f"Temporal at {address} has no namespace {namespace!r}", ExitCode.UNREACHABLE
                ) from err
            # Some API keys may not describe namespaces; the command's own calls
            # report any real problem, so only a missing namespace stops here.
            if err.status != RPCStatusCode.PERMISSION_DENIED:
                raise _rpc_error(err, address) from err
        return client


def _as_bytes(source: str | bytes) -> bytes:
    # envconfig: a str is the certificate's contents, bytes its raw data.
    return source.encode() if isinstance(source, str) else source


@asynccontextmanager
async def temporal(options: TemporalOptions) -> AsyncIterator[Client]:
    """Connect, and turn Temporal errors raised inside the block into :class:`CliError`."""
    address = options.profile().address or DEFAULT_ADDRESS
    client = await options.connect()
    try:
        yield client
    except RPCError as err:
        raise _rpc_error(err, address) from err
    except TemporalUnavailableError as err:
        raise CliError(f"Temporal unreachable at {address}: {err}", ExitCode.UNREACHABLE) from err


def _rpc_error(err: RPCError, address: str) -> CliError:
    if err.status in UNAVAILABLE:
        return CliError(f"Temporal unreachable at {address}: {err.message}", ExitCode.UNREACHABLE)
    return CliError(f"Temporal refused the request ({err.status.name}): {err.message}")


def workflow_id_for(cluster: str, node: str) -> str:
    """The node's incident workflow id.

    Raises:
        CliError: Exit code 2 if the cluster or node name is invalid.
    """
    try:
        return node_workflow_id(cluster, node)
    except ValueError as err:
        raise CliError(str(err), ExitCode.INVALID_INPUT) from err


def cluster_prefix(cluster: str) -> str:
    """The workflow id prefix shared by all of a cluster's incidents.

    Raises:
        CliError: Exit code 2 if the cluster name is invalid.
    """
    try:
        return node_workflow_id_prefix(cluster)
    except ValueError as err:
        raise CliError(str(err), ExitCode.INVALID_INPUT) from err


async def within(seconds: float, call: Awaitable[T], what: str) -> T:
    """Await ``call`` for at most ``seconds``; a timeout says a worker did not answer.

    Queries and updates are answered by a worker, so with no worker running
    they would wait forever.
    """
    try:
        async with asyncio.timeout(seconds):
            return await call
    except TimeoutError as err:
        raise CliError(
            f"no answer to {what} within {seconds:g}s: is a remediation worker running on "
            "the workflow's task queue?"
        ) from err
