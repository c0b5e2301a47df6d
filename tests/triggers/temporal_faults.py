"""Temporal failing chosen calls, for the trigger tests: a client interceptor, not a patch.

The SDK's client interceptors (``temporalio.client.Interceptor``) sit on the
client's own call path; :func:`with_faults` builds a second client over the
same connection with :class:`TemporalFaults` in that path. A planned fault is
raised where the server's answer would come back, as the ``RPCError`` the SDK
raises for that status; every other call goes to the real server.
"""

from __future__ import annotations

from collections import Counter, defaultdict, deque
from typing import Any

from temporalio.client import (
    Client,
    Interceptor,
    OutboundInterceptor,
    SignalWorkflowInput,
    StartWorkflowInput,
    WorkflowHandle,
)
from temporalio.service import RPCError, RPCStatusCode


def rpc_error(status: RPCStatusCode) -> RPCError:
    """The error the SDK raises when the server answers ``status``."""
    return RPCError(f"{status.name.lower().replace('_', ' ')} (injected by the test)", status, b"")


class TemporalFaults(Interceptor):
    """Fails the next starts and signals of chosen workflow ids with planned errors."""

    def __init__(self) -> None:
        self._planned: defaultdict[str, deque[BaseException]] = defaultdict(deque)
        self.calls: Counter[str] = Counter()
        """Start and signal calls made, by workflow id (failed ones included)."""

    def fail(self, workflow_id: str, *errors: BaseException) -> None:
        """Fail the next calls about ``workflow_id``, one error per call, in order."""
        self._planned[workflow_id].extend(errors)

    def planned(self, workflow_id: str) -> int:
        """Faults still planned for ``workflow_id``."""
        return len(self._planned[workflow_id])

    def check(self, workflow_id: str) -> None:
        """Count a call; raise its planned fault if one is left."""
        self.calls[workflow_id] += 1
        planned = self._planned[workflow_id]
        if planned:
            raise planned.popleft()

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        """Put the faults in the client's call path."""
        return _Faulty(next, self)


class _Faulty(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, faults: TemporalFaults) -> None:
        super().__init__(next)
        self._faults = faults

    async def start_workflow(self, input: StartWorkflowInput) -> WorkflowHandle[Any, Any]:
        self._faults.check(input.id)
        return await self.next.start_workflow(input)

    async def signal_workflow(self, input: SignalWorkflowInput) -> None:
        self._faults.check(input.id)
        await self.next.signal_workflow(input)


def with_faults(client: Client, faults: TemporalFaults) -> Client:
    """A client over ``client``'s connection whose starts and signals go through ``faults``."""
    config = client.config()
    config["interceptors"] = [*config["interceptors"], faults]
    return Client(**config)
