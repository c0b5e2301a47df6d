"""The permit guards' parent close policy, applied by the lane on the test server."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import NamedTuple

import pytest
import pytest_asyncio
from temporalio import workflow
from temporalio.api.enums.v1 import WorkflowExecutionStatus
from temporalio.api.workflow.v1 import WorkflowExecutionInfo
from temporalio.api.workflowservice.v1 import ListOpenWorkflowExecutionsRequest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from temporalio.workflow import ParentClosePolicy

from activities.world_time import TestServerTime
from gpu_remediation.ids import Signals
from gpu_remediation.semaphore_models import PermitGuardInput, PermitRelease
from tests.conftest import assert_eventually
from whatif.parent_close import OrphanedGuardRelease
from workflows.permit_guard import PermitGuardWorkflow

pytestmark = pytest.mark.integration

SEMAPHORE = "semaphore-like"


@workflow.defn(name="SemaphoreLike", sandboxed=False)
class SemaphoreLike:
    def __init__(self) -> None:
        self._released: list[PermitRelease] = []

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.signal(name=Signals.RELEASE_PERMIT)
    def release(self, release: PermitRelease) -> None:
        self._released.append(release)

    @workflow.query
    def released(self) -> list[PermitRelease]:
        return self._released


@workflow.defn(name="HolderLike", sandboxed=False)
class HolderLike:
    def __init__(self) -> None:
        self._close = False

    @workflow.run
    async def run(self, stay_open: bool) -> str:
        info = workflow.info()
        guard = await workflow.start_child_workflow(
            PermitGuardWorkflow.run,
            PermitGuardInput(
                semaphore_workflow_id=SEMAPHORE,
                request_id=f"{info.run_id}/0",
                holder_workflow_id=info.workflow_id,
                holder_run_id=info.run_id,
            ),
            id=f"{info.workflow_id}/guard",
            parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
        )
        await workflow.wait_condition(lambda: self._close or not stay_open)
        return guard.id

    @workflow.signal
    def close(self) -> None:
        self._close = True


class Server(NamedTuple):
    client: Client
    queue: str


@pytest_asyncio.fixture
async def server(own_time_skipping_env: WorkflowEnvironment) -> AsyncIterator[Server]:
    """A test server of its own with a worker and a semaphore-like workflow running."""
    client = await Client.connect(
        own_time_skipping_env.client.service_client.config.target_host,
        data_converter=pydantic_data_converter,
    )
    queue = f"parent-close-{uuid.uuid4().hex[:6]}"
    async with Worker(
        client,
        task_queue=queue,
        workflows=[HolderLike, PermitGuardWorkflow, SemaphoreLike],
    ):
        await client.start_workflow(SemaphoreLike.run, id=SEMAPHORE, task_queue=queue)
        yield Server(client, queue)


async def _listed(client: Client) -> Sequence[WorkflowExecutionInfo]:
    response = await client.workflow_service.list_open_workflow_executions(
        ListOpenWorkflowExecutionsRequest(namespace=client.namespace)
    )
    return response.executions


async def _open(client: Client) -> list[str]:
    return sorted(e.execution.workflow_id for e in await _listed(client))


async def _apply(apply: OrphanedGuardRelease, client: Client) -> bool:
    return await apply(await _listed(client))


async def _holder(server: Server, stay_open: bool) -> tuple[str, str]:
    client = server.client
    holder_id = f"holder-{uuid.uuid4().hex[:6]}"
    await client.start_workflow(HolderLike.run, stay_open, id=holder_id, task_queue=server.queue)
    guard_id = f"{holder_id}/guard"

    async def guard_open() -> list[str]:
        return await _open(client)

    await assert_eventually(guard_open, lambda ids: guard_id in ids)
    return holder_id, guard_id


async def test_the_test_server_leaves_a_closed_holders_guard_running(server: Server) -> None:
    plain_client = server.client
    # temporalio/sdk-java#1079: if this ever fails, the server applies the policy
    # itself and the lane's emulation can go.
    holder_id, guard_id = await _holder(server, stay_open=False)
    await plain_client.get_workflow_handle(holder_id).result()
    await TestServerTime(plain_client).sleep(3600)
    assert guard_id in await _open(plain_client)


async def test_cancelling_a_closed_holders_guard_holds_the_test_servers_time(
    server: Server,
) -> None:
    plain_client = server.client
    # Why the emulation terminates the guard instead of asking it to cancel.
    holder_id, guard_id = await _holder(server, stay_open=False)
    await plain_client.get_workflow_handle(holder_id).result()
    await plain_client.get_workflow_handle(guard_id).cancel()
    assert await plain_client.get_workflow_handle(guard_id).result() == "released"
    with pytest.raises(TimeoutError):
        # An hour of an idle server's time takes milliseconds; held, an hour.
        await asyncio.wait_for(TestServerTime(plain_client).sleep(3600), timeout=5)


async def test_a_closed_holders_permit_is_released_and_its_guard_ended(server: Server) -> None:
    plain_client = server.client
    apply = OrphanedGuardRelease(plain_client)
    holder_id, guard_id = await _holder(server, stay_open=False)
    holder_run = (await plain_client.get_workflow_handle(holder_id).describe()).run_id
    await plain_client.get_workflow_handle(holder_id).result()
    assert await _apply(apply, plain_client) is True
    semaphore = plain_client.get_workflow_handle(SEMAPHORE)
    released = await semaphore.query(SemaphoreLike.released)
    assert released == [
        PermitRelease(
            request_id=f"{holder_run}/0", reason=f"guard: holder {holder_id}/{holder_run} closed"
        )
    ]
    guard = await plain_client.get_workflow_handle(guard_id).describe()
    assert guard.raw_description.workflow_execution_info.status == (
        WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_TERMINATED
    )
    # Once: the guard is gone.
    assert await _apply(apply, plain_client) is False
    assert apply.released == 1
    # And the server's time still skips.
    await asyncio.wait_for(TestServerTime(plain_client).sleep(3600), timeout=5)


async def test_an_open_holders_guard_is_left_alone(server: Server) -> None:
    plain_client = server.client
    apply = OrphanedGuardRelease(plain_client)
    holder_id, guard_id = await _holder(server, stay_open=True)
    # Twice: the guard's holder is read once and remembered.
    assert await _apply(apply, plain_client) is False
    assert await _apply(apply, plain_client) is False
    assert guard_id in await _open(plain_client)
    semaphore = plain_client.get_workflow_handle(SEMAPHORE)
    assert await semaphore.query(SemaphoreLike.released) == []
    handle = plain_client.get_workflow_handle(holder_id)
    await handle.signal(HolderLike.close)
    await handle.result()
    assert await _apply(apply, plain_client) is True
    assert apply.released == 1


async def test_a_guard_started_by_no_workflow_is_left_alone(server: Server) -> None:
    # No parent, so no parent close policy: nothing to apply.
    plain_client = server.client
    apply = OrphanedGuardRelease(plain_client)
    guard_id = f"orphan-{uuid.uuid4().hex[:6]}"
    await plain_client.start_workflow(
        PermitGuardWorkflow.run,
        PermitGuardInput(
            semaphore_workflow_id=SEMAPHORE,
            request_id="r/0",
            holder_workflow_id="someone",
            holder_run_id="run",
        ),
        id=guard_id,
        task_queue=server.queue,
    )
    assert await _apply(apply, plain_client) is False
    assert guard_id in await _open(plain_client)
    semaphore = plain_client.get_workflow_handle(SEMAPHORE)
    assert await semaphore.query(SemaphoreLike.released) == []
