"""What the starter makes of Temporal's errors: transient (retry), invalid (refuse), or other.

Temporal's answers are injected with a client interceptor
(``tests/triggers/temporal_faults.py``) on the real dev server's connection.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from temporalio.client import Client
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from gpu_remediation.ids import NODE_WORKFLOW_TYPE
from gpu_remediation.models import ConditionEvidence
from gpu_remediation.policy_loader import load_policy
from tests.triggers.temporal_faults import TemporalFaults, rpc_error, with_faults
from triggers.starter import (
    TRANSIENT_STATUSES,
    IncidentStarter,
    TemporalUnavailableError,
    is_invalid,
    is_transient,
)


def _condition(*, cleared: bool = False) -> ConditionEvidence:
    return ConditionEvidence(
        observed_at=datetime.now(UTC),
        source="test",
        type="Ready",
        status="True" if cleared else "False",
        cleared=cleared,
    )


def _starter(client: Client, task_queue: str) -> IncidentStarter:
    return IncidentStarter(
        client, cluster=f"c{uuid.uuid4().hex[:8]}", policy=load_policy(), task_queue=task_queue
    )


@pytest.mark.parametrize("status", sorted(TRANSIENT_STATUSES), ids=lambda s: s.name)
async def test_a_transient_status_is_temporal_unavailable_and_the_retry_delivers(
    dev_client: Client, task_queue: str, status: RPCStatusCode
) -> None:
    faults = TemporalFaults()
    starter = _starter(with_faults(dev_client, faults), task_queue)
    workflow_id = starter.workflow_id("gpu-t")
    faults.fail(workflow_id, rpc_error(status))
    with pytest.raises(TemporalUnavailableError) as raised:
        await starter.report("gpu-t", [_condition()], report_id="r1")
    assert is_transient(raised.value)
    assert await starter.report("gpu-t", [_condition()], report_id="r1") == workflow_id
    await dev_client.get_workflow_handle(workflow_id).terminate("test done")


async def test_internal_on_a_recovery_is_temporal_unavailable(
    dev_client: Client, task_queue: str
) -> None:
    faults = TemporalFaults()
    starter = _starter(with_faults(dev_client, faults), task_queue)
    workflow_id = await starter.report("gpu-r", [_condition()], report_id="r1")
    faults.fail(workflow_id, rpc_error(RPCStatusCode.INTERNAL))
    with pytest.raises(TemporalUnavailableError, match="INTERNAL"):
        await starter.report_recovery("gpu-r", [_condition(cleared=True)], report_id="r2")
    assert await starter.report_recovery("gpu-r", [_condition(cleared=True)], report_id="r2")
    await dev_client.get_workflow_handle(workflow_id).terminate("test done")


@pytest.mark.parametrize(
    ("status", "invalid"),
    [(RPCStatusCode.INVALID_ARGUMENT, True), (RPCStatusCode.PERMISSION_DENIED, False)],
    ids=["INVALID_ARGUMENT", "PERMISSION_DENIED"],
)
async def test_other_refusals_stay_rpc_errors_and_only_invalid_argument_is_invalid(
    dev_client: Client, task_queue: str, status: RPCStatusCode, invalid: bool
) -> None:
    faults = TemporalFaults()
    starter = _starter(with_faults(dev_client, faults), task_queue)
    faults.fail(starter.workflow_id("gpu-x"), rpc_error(status))
    with pytest.raises(RPCError) as raised:
        await starter.report("gpu-x", [_condition()])
    assert raised.value.status == status
    assert is_invalid(raised.value) is invalid
    assert not is_transient(raised.value)


async def test_losing_the_start_race_every_time_is_temporal_unavailable(
    dev_client: Client, task_queue: str
) -> None:
    faults = TemporalFaults()
    starter = _starter(with_faults(dev_client, faults), task_queue)
    workflow_id = starter.workflow_id("gpu-race")
    lost = [WorkflowAlreadyStartedError(workflow_id, NODE_WORKFLOW_TYPE) for _ in range(4)]
    faults.fail(workflow_id, *lost)
    with pytest.raises(TemporalUnavailableError, match="lost the start race"):
        await starter.report("gpu-race", [_condition()])


def test_validation_failures_are_invalid_and_connection_errors_transient() -> None:
    assert is_invalid(ValueError("bad node name"))
    assert not is_transient(ValueError("bad node name"))
    assert is_transient(ConnectionRefusedError("refused"))
    assert not is_invalid(RuntimeError("unforeseen"))
    assert not is_transient(RuntimeError("unforeseen"))
