"""Today's node workflow replays recorded incidents: determinism is kept.

The histories were recorded from real runs by ``make_node_histories``. If this
fails after a change, incidents in flight would break on deploy: guard the
change with ``workflow.patched`` (see docs/operations.md) or, if it is meant to
change the commands and no incident can be in flight, record them again.
"""

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from tests.workflows.node_support import cluster, xid
from worker import WORKFLOWS

HISTORIES = sorted((Path(__file__).parent / "histories").glob("node_*.json"))


def load(path: Path) -> WorkflowHistory:
    record = json.loads(path.read_text())
    return WorkflowHistory.from_json(record["workflow_id"], record["history"])


def replayer() -> Replayer:
    return Replayer(workflows=list(WORKFLOWS), data_converter=pydantic_data_converter)


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_recorded_incident_replays(path: Path) -> None:
    history = load(path)
    result = await replayer().replay_workflow(history, raise_on_replay_failure=True)
    assert result.replay_failure is None


def test_every_recorded_scenario_is_present() -> None:
    assert len(HISTORIES) >= 8


async def test_a_fresh_incident_replays_against_its_own_history(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with cluster(time_skipping_env, task_queue) as c:
        handle = await c.report("gpu-60", xid(48))
        await handle.result()
        history = await handle.fetch_history()
    result = await replayer().replay_workflow(history, raise_on_replay_failure=True)
    assert result.replay_failure is None
