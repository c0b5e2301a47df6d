"""Regenerate tests/workflows/histories/node_*.json from real runs.

Run ``.venv/bin/python -m tests.workflows.make_node_histories`` after an
intended change to the node workflow's commands (and only then): the replay
test fails on any unintended one, which would break incidents in flight. A
patched change (``workflow.patched``, from 1.0 on: docs/operations.md) keeps the
old files and records the new path beside them:
``make_node_histories climbs_to_replacement --suffix _v2``.
Each scenario takes a different path through the ladder.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from gpu_remediation.ids import Updates
from gpu_remediation.models import EfaEvidence, FaultClass, Rung
from gpu_remediation.temporal_setup import register_search_attributes, time_skipping_server_path
from gpu_remediation.workflow_models import (
    AbortInput,
    ApproveInput,
    NodeRemediationResult,
    NodeRemediationState,
    OperatorRequest,
)
from tests.conftest import assert_eventually
from tests.doubles import FakeFleet, failing_diag
from tests.gpu_remediation.evidence_factories import straggler
from tests.workflows.job_support import answer_json, job, on_node, relay_answer, requested_incident
from tests.workflows.node_support import (
    Cluster,
    NodeHandle,
    cluster,
    condition,
    policy,
    with_fault_class,
    with_rung,
    xid,
)

HISTORIES = Path(__file__).parent / "histories"


async def reboot_repairs(c: Cluster) -> NodeHandle:
    return await c.report("gpu-h1", xid(79, gpu=3))


async def climbs_to_replacement(c: Cluster) -> NodeHandle:
    c.fleet.reset_status = "not_supported"
    c.fleet.diagnostics = [failing_diag(80)]
    return await c.report("gpu-h2", xid(48, gpu=1))


async def approval_pause_resume(c: Cluster) -> NodeHandle:
    handle = await c.report(
        "gpu-h3", xid(79), pol=with_rung(policy(), Rung.REBOOT, requires_approval=True)
    )
    await assert_eventually(
        lambda: c.state(handle), lambda s: s.waiting_for == "approval of reboot"
    )
    await handle.execute_update(
        Updates.PAUSE, OperatorRequest(by="h"), result_type=NodeRemediationState
    )
    await handle.execute_update(
        Updates.RESUME, OperatorRequest(by="h"), result_type=NodeRemediationState
    )
    await handle.execute_update(
        Updates.APPROVE, ApproveInput(rung=Rung.REBOOT), result_type=NodeRemediationState
    )
    return handle


async def grace_transient(c: Cluster) -> NodeHandle:
    pol = with_fault_class(policy(), FaultClass.NODE_NOT_READY, grace=timedelta(minutes=10))
    handle = await c.report("gpu-h4", condition("Ready", "False"), pol=pol)
    await assert_eventually(lambda: c.state(handle), lambda s: s.stage == "grace")
    await c.signal(handle, "gpu-h4", condition("Ready", "True", cleared=True))
    return handle


async def breaker_then_abort(c: Cluster) -> NodeHandle:
    c.fleet.pool_unhealthy = 8
    handle = await c.report("gpu-h5", xid(79))
    await assert_eventually(
        lambda: c.state(handle), lambda s: s.stage == "held" and s.waiting_for is not None
    )
    await handle.execute_update(
        Updates.ABORT, AbortInput(reason="h"), result_type=NodeRemediationState
    )
    return handle


async def relapse_in_cooldown(c: Cluster) -> NodeHandle:
    handle = await c.report("gpu-h6", xid(48, gpu=2), pol=policy(cooldown=timedelta(hours=1)))
    await assert_eventually(lambda: c.state(handle), lambda s: s.stage == "cooldown")
    await c.signal(handle, "gpu-h6", xid(48, gpu=2))
    return handle


async def dry_run(c: Cluster) -> NodeHandle:
    return await c.report("gpu-h7", xid(79), pol=policy(dry_run=True))


async def checkpoint_answered(c: Cluster) -> NodeHandle:
    c.fleet.node_jobs = [on_node(job())]
    handle = await c.report("gpu-h8", xid(48, gpu=1))
    await assert_eventually(lambda: c.state(handle), lambda s: s.checkpoint == "asked")
    incident = requested_incident(c.fleet)
    await relay_answer(handle, incident, answer_json(incident))
    return handle


async def checkpoint_every_job(c: Cluster) -> NodeHandle:
    """Two jobs asked, a pause during the wait: the drain waits for both answers and resume."""
    c.fleet.node_jobs = [on_node(job("llm"), job("eval", nodes=2))]
    handle = await c.report("gpu-h9", xid(48, gpu=1))
    await assert_eventually(lambda: c.state(handle), lambda s: s.checkpoint == "asked")
    await handle.execute_update(
        Updates.PAUSE, OperatorRequest(by="h"), result_type=NodeRemediationState
    )
    incident = requested_incident(c.fleet)
    await relay_answer(handle, incident, answer_json(incident), job="ml/llm")
    await relay_answer(handle, incident, answer_json(incident, step=7), job="ml/eval")
    await assert_eventually(
        lambda: c.state(handle), lambda s: s.waiting_for == "resume (paused by an operator)"
    )
    await handle.execute_update(
        Updates.RESUME, OperatorRequest(by="h"), result_type=NodeRemediationState
    )
    return handle


async def when_idle_job_ends_unseen(c: Cluster) -> NodeHandle:
    """Row remap pending: the job ends with no word from the relay; a recheck sees it."""
    still = on_node(job(supported=False))
    c.fleet.node_jobs = [still, still, on_node()]
    return await c.report("gpu-h10", xid(63))


async def efa_link_verified(c: Cluster) -> NodeHandle:
    """An EFA link down: rebooted, then verified by the node agent's EFA checks."""
    c.fleet.efa_link_down_until_reboot = True
    pol = with_fault_class(policy(), FaultClass.EFA_LINK_DOWN, grace=timedelta(0))
    link = EfaEvidence(
        observed_at=datetime.now(UTC), source="efa-check", check="link", device="rdmap113s0"
    )
    return await c.report("gpu-h11", link, pol=pol)


async def dead_host_climbs(c: Cluster) -> NodeHandle:
    """A delivered reboot that never brings the host back: one window, then replace."""
    c.fleet.host_dead_after_reboot = True
    return await c.report("gpu-h12", xid(79, gpu=0))


async def continued_in_hold(c: Cluster) -> NodeHandle:
    """A hand-over flooded with signals continues as new; the new run's abort ends it."""
    c.history_limit = 100
    pol = with_fault_class(policy(), FaultClass.GPU_FALLEN_OFF_BUS, start_rung=Rung.ESCALATE)
    handle = await c.report("gpu-h13", xid(79), pol=pol)
    await assert_eventually(lambda: c.state(handle), lambda s: s.waiting_for is not None)
    first_run = (await handle.describe()).run_id
    for _ in range(40):
        await c.signal(handle, "gpu-h13", xid(79))
    latest = c.client.get_workflow_handle(handle.id, result_type=NodeRemediationResult)
    await assert_eventually(lambda: latest.describe(), lambda d: d.run_id != first_run, timeout=30)
    await assert_eventually(
        lambda: c.state(latest), lambda s: s.waiting_for is not None, timeout=30
    )
    await latest.execute_update(
        Updates.ABORT, AbortInput(reason="h"), result_type=NodeRemediationState
    )
    return handle


async def straggler_never_idle(c: Cluster) -> NodeHandle:
    """A job's straggler report on a node that never goes idle: given back untouched."""
    c.fleet.node_jobs = [on_node(job(supported=False))]
    report = straggler(observed_at=datetime.now(UTC))
    pol = policy()
    short = pol.model_copy(
        update={"jobs": pol.jobs.model_copy(update={"max_defer": timedelta(hours=1)})}
    )
    return await c.report("gpu-h14", report, pol=short)


SCENARIOS: dict[str, Callable[[Cluster], Awaitable[NodeHandle]]] = {
    "reboot_repairs": reboot_repairs,
    "climbs_to_replacement": climbs_to_replacement,
    "approval_pause_resume": approval_pause_resume,
    "grace_transient": grace_transient,
    "breaker_then_abort": breaker_then_abort,
    "relapse_in_cooldown": relapse_in_cooldown,
    "dry_run": dry_run,
    "checkpoint_answered": checkpoint_answered,
    "checkpoint_every_job": checkpoint_every_job,
    "when_idle_job_ends_unseen": when_idle_job_ends_unseen,
    "efa_link_verified": efa_link_verified,
    "dead_host_climbs": dead_host_climbs,
    "continued_in_hold": continued_in_hold,
    "straggler_never_idle": straggler_never_idle,
}


async def main(only: list[str], suffix: str) -> None:
    """Record the scenarios named in ``only`` (all if empty) as ``node_<name><suffix>.json``.

    A suffix keeps the older recordings: after a patched change (``workflow.patched``)
    both the old and the new command sequences must keep replaying.
    """
    unknown = sorted(set(only) - set(SCENARIOS))
    if unknown:
        raise SystemExit(f"unknown scenarios {unknown}; known: {sorted(SCENARIOS)}")
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=pydantic_data_converter,
        test_server_existing_path=str(time_skipping_server_path()),
    )
    await register_search_attributes(env.client)
    try:
        for name, scenario in SCENARIOS.items():
            if only and name not in only:
                continue
            async with cluster(env, f"history-{uuid.uuid4()}", FakeFleet()) as c:
                handle = await scenario(c)
                await handle.result()
                # The run the scenario started, and the last one if it continued as new.
                first = c.client.get_workflow_handle(handle.id, run_id=handle.result_run_id)
                histories = {"": await first.fetch_history()}
                last = await c.client.get_workflow_handle(handle.id).describe()
                if last.run_id != handle.result_run_id:  # it continued as new
                    histories["_last_run"] = await c.client.get_workflow_handle(
                        handle.id, run_id=last.run_id
                    ).fetch_history()
            for part, history in histories.items():
                # The workflow id is part of what replay checks (child ids derive from it).
                record = {"workflow_id": handle.id, "history": json.loads(history.to_json())}
                path = HISTORIES / f"node_{name}{part}{suffix}.json"
                path.write_text(json.dumps(record, indent=1))
                print(f"recorded {path.name} ({len(history.events)} events)")
    finally:
        await env.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Record node workflow histories for replay.")
    parser.add_argument("scenarios", nargs="*", help=f"any of {sorted(SCENARIOS)}")
    parser.add_argument("--suffix", default="", help="e.g. _v2: keep older files")
    args = parser.parse_args()
    asyncio.run(main(args.scenarios, args.suffix))
