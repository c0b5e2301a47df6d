"""After a listing, conditions open incidents still hold on healthy nodes are cleared."""

from __future__ import annotations

import asyncio

from gpu_remediation.models import AlertEvidence, ConditionEvidence, Evidence
from gpu_remediation.workflow_models import NodeRemediationState
from tests.conftest import assert_eventually
from tests.triggers.tracker_support import NODE, TRIGGERS, at, ready
from triggers.condition_tracker import SOURCE, ConditionReport, ConditionTracker
from triggers.starter import TemporalUnavailableError
from triggers.unseen_recoveries import UnseenRecoveries


def not_ready(minutes: float, *, source: str = SOURCE) -> ConditionEvidence:
    return ConditionEvidence(
        observed_at=at(minutes), source=source, type="Ready", status="False", reason="NotReady"
    )


def incident(node: str, *held: Evidence) -> NodeRemediationState:
    """An open incident in grace holding ``held``."""
    return NodeRemediationState(
        cluster="c",
        node=node,
        node_pool=None,
        fault_class=None,
        rung=None,
        stage="grace",
        waiting_for=None,
        paused=False,
        dry_run=False,
        evidence=list(held),
        active_evidence=list(held),
        attempts=[],
        decisions=[],
        outcome=None,
        started_at=at(0),
    )


class Incidents:
    """Answers the lookups in turn: an exception is raised, a list returned."""

    def __init__(self, *answers: list[NodeRemediationState] | Exception) -> None:
        self.answers = list(answers)
        self.calls = 0

    async def open_incidents(self) -> list[NodeRemediationState]:
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


async def poll_until_reported(checker: UnseenRecoveries, minutes: float) -> list[ConditionReport]:
    """Poll as the watcher's loop does until a lookup has been taken in."""
    done = checker.lookups_done
    reports: list[ConditionReport] = []

    async def poll() -> int:
        reports.extend(checker.poll(at(minutes)))
        await asyncio.sleep(0)
        return checker.lookups_done

    await assert_eventually(poll, lambda n: n > done, interval=0)
    return reports


async def test_a_condition_held_on_a_healthy_node_is_cleared_after_the_lookup() -> None:
    tracker = ConditionTracker(TRIGGERS)
    checker = UnseenRecoveries(
        Incidents([incident(NODE, not_ready(0))]), tracker, backoff_initial=0, backoff_max=0
    )
    checker.listed({NODE: ready("True", at(10))})
    (clear,) = await poll_until_reported(checker, 30)
    assert clear.kind == "clear"
    assert clear.node == NODE
    assert clear.evidence.observed_at == at(10)


async def test_a_failed_lookup_is_retried_and_the_listing_kept() -> None:
    tracker = ConditionTracker(TRIGGERS)
    incidents = Incidents(TemporalUnavailableError("down"), [incident(NODE, not_ready(0))])
    checker = UnseenRecoveries(incidents, tracker, backoff_initial=0, backoff_max=0)
    checker.listed({NODE: ready("True", at(10))})
    (clear,) = await poll_until_reported(checker, 30)
    assert clear.kind == "clear"
    assert incidents.calls == 2


async def test_nodes_not_listed_and_evidence_from_others_are_left_alone() -> None:
    tracker = ConditionTracker(TRIGGERS)
    alert = AlertEvidence(observed_at=at(0), source="alertmanager", labels={"alertname": "Xid"})
    states = [
        incident("gpu-elsewhere", not_ready(0)),  # another selector's node
        incident(NODE, not_ready(0, source="someone-else"), alert),
    ]
    checker = UnseenRecoveries(Incidents(states), tracker, backoff_initial=0, backoff_max=0)
    checker.listed({NODE: ready("True", at(10))})
    assert await poll_until_reported(checker, 30) == []
    assert tracker.episodes() == []


async def test_without_a_listing_nothing_is_looked_up() -> None:
    incidents = Incidents()
    checker = UnseenRecoveries(
        incidents, ConditionTracker(TRIGGERS), backoff_initial=0, backoff_max=0
    )
    assert checker.poll(at(0)) == []
    await asyncio.sleep(0)
    assert incidents.calls == 0
