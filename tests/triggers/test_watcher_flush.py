"""The watcher's outbox goes out many nodes at once, each node's reports in the order seen."""

from __future__ import annotations

import asyncio

import pytest
from kubernetes import client as k8s
from temporalio.client import Client

from tests.triggers.watcher_support import report, watcher_policy
from triggers.condition_tracker import ConditionReport
from triggers.starter import IncidentStarter, TemporalUnavailableError
from triggers.watcher import FLUSH_WIDTH, NodeConditionWatcher, ReportDelivery


class RecordingDelivery(ReportDelivery):
    """Records what is delivered and how many deliveries are in flight at once."""

    def __init__(self, unavailable_once: set[str] = frozenset(), refused: set[str] = frozenset()):
        self.sent: list[str] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self._unavailable_once = set(unavailable_once)
        self._refused = refused

    async def deliver(self, report: ConditionReport) -> None:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.01)
            if report.report_id in self._unavailable_once:
                self._unavailable_once.discard(report.report_id)
                raise TemporalUnavailableError("Temporal unavailable (test)")
            if report.report_id in self._refused:
                raise ValueError("refused (test)")
            self.sent.append(report.report_id)
        finally:
            self.in_flight -= 1


def watcher_with(delivery: ReportDelivery, client: Client) -> NodeConditionWatcher:
    starter = IncidentStarter(client, cluster="flush", policy=watcher_policy(), task_queue="tq")
    api = k8s.ApiClient(k8s.Configuration(host="http://127.0.0.1:9"))  # never called
    return NodeConditionWatcher(api, starter, client, backoff_initial=0.0, delivery=delivery)


def sent_for(delivery: RecordingDelivery, node: str) -> list[str]:
    return [rid for rid in delivery.sent if rid.startswith(f"{node}-")]


async def test_reports_of_many_nodes_go_out_together_and_each_nodes_in_order(
    dev_client: Client,
) -> None:
    delivery = RecordingDelivery()
    watcher = watcher_with(delivery, dev_client)
    nodes = [f"gpu-{i}" for i in range(100)]
    for n in range(3):
        watcher._outbox.extend(report(node, n) for node in nodes)

    await watcher._flush()

    assert watcher.pending == 0
    assert len(delivery.sent) == 300
    assert delivery.most_in_flight == FLUSH_WIDTH
    for node in nodes:
        assert sent_for(delivery, node) == [f"{node}-0", f"{node}-1", f"{node}-2"]


async def test_a_report_temporal_could_not_take_waits_and_its_nodes_later_reports_wait_behind_it(
    dev_client: Client,
) -> None:
    delivery = RecordingDelivery(unavailable_once={"gpu-b-0"})
    watcher = watcher_with(delivery, dev_client)
    watcher._outbox.extend(
        [report("gpu-a", 0), report("gpu-b", 0), report("gpu-b", 1), report("gpu-c", 0)]
    )

    await watcher._flush()

    assert sorted(delivery.sent) == ["gpu-a-0", "gpu-c-0"]
    assert [r.report_id for r in watcher._outbox] == ["gpu-b-0", "gpu-b-1"]
    await asyncio.sleep(0.01)  # the retry delay (backoff_initial=0) has passed
    await watcher._flush()
    assert sent_for(delivery, "gpu-b") == ["gpu-b-0", "gpu-b-1"]
    assert watcher.pending == 0


async def test_a_refused_report_is_dropped_without_holding_back_the_rest(
    dev_client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    delivery = RecordingDelivery(refused={"gpu-a-0"})
    watcher = watcher_with(delivery, dev_client)
    watcher._outbox.extend([report("gpu-a", 0), report("gpu-a", 1), report("gpu-b", 0)])

    await watcher._flush()

    assert delivery.sent == ["gpu-b-0", "gpu-a-1"]
    assert watcher.pending == 0
    assert any("refused and dropped" in r.getMessage() for r in caplog.records)
