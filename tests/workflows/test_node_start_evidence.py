"""The first report carried in the start's input (the starter's plain start)."""

from temporalio.testing import WorkflowEnvironment

from gpu_remediation.ids import Activities as A
from gpu_remediation.models import EvidenceReport, Outcome
from tests.workflows.node_support import cluster, xid


async def test_an_incident_started_with_its_evidence_in_the_input_repairs_the_node(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with cluster(time_skipping_env, task_queue) as c:
        evidence = await c.stamped([xid(48, gpu=2)])
        report = EvidenceReport(node="gpu-s1", evidence=list(evidence), report_id="first")
        handle = await c.start_carrying("gpu-s1", report)
        result = await handle.result()
    assert result.outcome == Outcome.REPAIRED
    assert c.fleet.called(A.RESET_GPUS) == 1


async def test_a_report_carried_in_the_input_and_signalled_again_counts_once(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with cluster(time_skipping_env, task_queue) as c:
        evidence = await c.stamped([xid(48, gpu=2)])
        report = EvidenceReport(node="gpu-s2", evidence=list(evidence), report_id="first")
        handle = await c.start_carrying("gpu-s2", report)
        # The starter's retry after an ambiguous start: the same report, by signal.
        await c.report("gpu-s2", *evidence, report_id="first", stamp=False)
        state = await c.state(handle)
        result = await handle.result()
    assert len(state.evidence) == 1
    assert result.outcome == Outcome.REPAIRED


async def test_evidence_for_another_node_in_the_input_is_ignored(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with cluster(time_skipping_env, task_queue) as c:
        evidence = await c.stamped([xid(48, gpu=2)])
        report = EvidenceReport(node="gpu-other", evidence=list(evidence), report_id="x")
        handle = await c.start_carrying("gpu-s3", report)
        result = await handle.result()
    assert result.outcome == Outcome.NO_ACTION
    assert c.fleet.side_effects() == []
