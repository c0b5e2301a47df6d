"""No report is lost to a transient Temporal error; the watcher's outbox is bounded and says so.

Failures are injected as in ``test_watcher_flush.py``: through the watcher's
delivery seam (:class:`~triggers.watcher.ReportDelivery`), here wrapping the
real delivery to the dev server, so what finally arrives is read back from the
node's incident.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable

import pytest
from kubernetes import client as k8s
from prometheus_client.parser import text_string_to_metric_families
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from tests.conftest import assert_eventually
from tests.triggers.temporal_faults import rpc_error
from tests.triggers.watcher_support import (
    GPU_LABELS,
    emulator,
    evidence_reports,
    new_cluster,
    report,
    running,
    terminate_incidents,
    watcher_policy,
)
from triggers.condition_tracker import ConditionReport
from triggers.metrics import WatcherMetrics
from triggers.starter import IncidentStarter, TemporalUnavailableError
from triggers.watcher import FLUSH_WIDTH, NodeConditionWatcher, ReportDelivery


class FlakyDelivery(ReportDelivery):
    """Fails chosen reports' first attempts with chosen errors; otherwise records or delivers.

    Args:
        failures: Per report id (or a prefix of it: the tracker's ids hold the
            episode's start), the errors the next attempts raise, in order.
        failing_nodes: Nodes whose every attempt raises ``error``.
        error: What a failing node's attempts raise.
        real: When given, what does not fail goes to it (the dev server);
            otherwise it is only recorded.
    """

    def __init__(
        self,
        failures: dict[str, list[BaseException]] | None = None,
        *,
        failing_nodes: set[str] | None = None,
        error: Callable[[], BaseException] = lambda: rpc_error(RPCStatusCode.INTERNAL),
        real: ReportDelivery | None = None,
    ) -> None:
        self._failures = {k: list(v) for k, v in (failures or {}).items()}
        self.failing_nodes = set(failing_nodes or ())
        self._error = error
        self._real = real
        self.sent: list[str] = []
        self.attempts: Counter[str] = Counter()

    async def deliver(self, report: ConditionReport) -> None:
        self.attempts[report.report_id] += 1
        await asyncio.sleep(0.001)
        planned = next(
            (
                errors
                for prefix, errors in self._failures.items()
                if report.report_id.startswith(prefix)
            ),
            None,
        )
        if planned:
            raise planned.pop(0)
        if report.node in self.failing_nodes:
            raise self._error()
        if self._real is not None:
            await self._real.deliver(report)
        self.sent.append(report.report_id)


def flush_watcher(
    delivery: ReportDelivery, client: Client, *, backoff: float = 0.0, **options: object
) -> NodeConditionWatcher:
    starter = IncidentStarter(client, cluster="flaky", policy=watcher_policy(), task_queue="tq")
    api = k8s.ApiClient(k8s.Configuration(host="http://127.0.0.1:9"))  # never called
    return NodeConditionWatcher(
        api,
        starter,
        client,
        backoff_initial=backoff,
        backoff_max=backoff,
        delivery=delivery,
        **options,  # type: ignore[arg-type]
    )


def samples(metrics: WatcherMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.exposition().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_a_transient_internal_error_from_temporal_loses_no_report(
    dev_client: Client, task_queue: str
) -> None:
    # Issue 35: a report that met INTERNAL was dropped, and the tracker never
    # reports the same episode again, so the fault stayed unreported for good.
    cluster = new_cluster()
    starter = IncidentStarter(
        dev_client, cluster=cluster, policy=watcher_policy(), task_queue=task_queue
    )
    first_report = "condition:gpu-i:GpuHealthProblem:"
    internal = [rpc_error(RPCStatusCode.INTERNAL) for _ in range(3)]
    delivery = FlakyDelivery({first_report: internal}, real=ReportDelivery(starter, dev_client))
    with emulator() as emu:
        emu.store.put_node("gpu-i", labels=GPU_LABELS)
        emu.store.set_node_condition("gpu-i", "GpuHealthProblem", "True", message="Xid 79")
        with emu.api_client() as api:
            watcher = NodeConditionWatcher(
                api,
                starter,
                dev_client,
                tick_interval=0.05,
                watch_timeout=5,
                backoff_initial=0.05,
                backoff_max=0.4,
                delivery=delivery,
            )
            try:
                async with running(watcher):
                    reports = await assert_eventually(
                        lambda: evidence_reports(dev_client, cluster, "gpu-i"),
                        lambda r: len(r) == 1,
                        timeout=15,
                    )

                    async def pending() -> int:
                        return watcher.pending

                    await assert_eventually(pending, lambda n: n == 0)
            finally:
                await terminate_incidents(dev_client, cluster, "gpu-i")
    assert reports[0].report_id.startswith(first_report)
    # Three INTERNAL answers, then the fourth attempt arrived; nothing twice.
    assert [n for rid, n in delivery.attempts.items() if rid.startswith(first_report)] == [4]
    assert delivery.sent == [reports[0].report_id]


@pytest.mark.parametrize(
    "error",
    [
        *(
            rpc_error(status)
            for status in (
                RPCStatusCode.INTERNAL,
                RPCStatusCode.UNKNOWN,
                RPCStatusCode.UNAVAILABLE,
                RPCStatusCode.DEADLINE_EXCEEDED,
                RPCStatusCode.RESOURCE_EXHAUSTED,
                RPCStatusCode.ABORTED,
                RPCStatusCode.PERMISSION_DENIED,  # the setup is wrong, not the report
            )
        ),
        TemporalUnavailableError("Temporal unavailable (test)"),
        ConnectionResetError("connection reset (test)"),
        RuntimeError("something unforeseen (test)"),
    ],
    ids=lambda e: e.status.name if isinstance(e, RPCError) else type(e).__name__,
)
async def test_any_error_but_an_invalid_report_keeps_the_report_and_its_nodes_order(
    dev_client: Client, error: BaseException
) -> None:
    delivery = FlakyDelivery({"gpu-a-0": [error, error]})
    watcher = flush_watcher(delivery, dev_client)
    watcher._enqueue([report("gpu-a", 0), report("gpu-a", 1), report("gpu-b", 0)])

    for _ in range(3):
        await watcher._flush()
        await asyncio.sleep(0.005)

    assert delivery.sent == ["gpu-b-0", "gpu-a-0", "gpu-a-1"]
    assert delivery.attempts["gpu-a-0"] == 3
    assert watcher.pending == 0


@pytest.mark.parametrize(
    "error",
    [rpc_error(RPCStatusCode.INVALID_ARGUMENT), ValueError("invalid node name (test)")],
    ids=["INVALID_ARGUMENT", "ValueError"],
)
async def test_only_an_invalid_report_is_dropped_counted_and_logged(
    dev_client: Client, error: BaseException, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = WatcherMetrics()
    delivery = FlakyDelivery({"gpu-a-0": [error]})
    watcher = flush_watcher(delivery, dev_client, metrics=metrics)
    watcher._enqueue([report("gpu-a", 0), report("gpu-a", 1)])

    await watcher._flush()

    assert delivery.sent == ["gpu-a-1"]
    assert delivery.attempts["gpu-a-0"] == 1
    assert samples(metrics)[("gpu_remediation_watcher_reports_dropped_total", ())] == 1
    assert any("gpu-a-0 refused and dropped" in r.getMessage() for r in caplog.records)


async def test_a_node_that_keeps_failing_backs_off_alone_and_the_others_go_on(
    dev_client: Client,
) -> None:
    delivery = FlakyDelivery(failing_nodes={"gpu-bad"})
    watcher = flush_watcher(delivery, dev_client, backoff=60.0)
    watcher._enqueue([report("gpu-bad", 0), report("gpu-bad", 1), report("gpu-ok", 0)])

    await watcher._flush()
    watcher._enqueue([report("gpu-ok", 1), report("gpu-new", 0)])
    await watcher._flush()  # at once: the bad node's backoff is its own

    assert delivery.sent == ["gpu-ok-0", "gpu-ok-1", "gpu-new-0"]
    assert delivery.attempts["gpu-bad-0"] == 1  # not retried before its backoff
    assert [r.report_id for r in watcher._outbox] == ["gpu-bad-0", "gpu-bad-1"]


async def test_when_every_report_of_a_wave_fails_the_whole_flush_backs_off(
    dev_client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gpu_remediation.watcher")
    nodes = [f"gpu-{i}" for i in range(3 * FLUSH_WIDTH)]
    delivery = FlakyDelivery(failing_nodes=set(nodes))
    metrics = WatcherMetrics()
    watcher = flush_watcher(delivery, dev_client, backoff=60.0, metrics=metrics)
    watcher._enqueue(report(node, 0) for node in nodes)

    await watcher._flush()
    await watcher._flush()  # within the backoff: Temporal is not called

    assert sum(delivery.attempts.values()) == FLUSH_WIDTH  # one wave, not one per node
    assert watcher.pending == len(nodes)
    failures = samples(metrics)[("gpu_remediation_watcher_delivery_failures_total", ())]
    assert failures == FLUSH_WIDTH
    assert any(
        "internal (injected by the test)" in r.getMessage()
        and "retrying in 60.0s" in r.getMessage()
        for r in caplog.records
    )


async def test_a_full_node_queue_refuses_new_reports_with_a_count_and_keeps_the_waiting_ones(
    dev_client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gpu_remediation.watcher")
    metrics = WatcherMetrics()
    delivery = FlakyDelivery(failing_nodes={"gpu-a"})
    watcher = flush_watcher(delivery, dev_client, metrics=metrics, max_pending_per_node=3)

    watcher._enqueue(report("gpu-a", n) for n in range(5))
    await watcher._flush()
    watcher._enqueue([report("gpu-b", 0)])  # another node still has room

    assert [r.report_id for r in watcher._outbox] == ["gpu-a-0", "gpu-a-1", "gpu-a-2", "gpu-b-0"]
    assert watcher.refused == {"node_queue_full": 2, "outbox_full": 0}
    refused = ("gpu_remediation_watcher_reports_refused_total", (("reason", "node_queue_full"),))
    assert samples(metrics)[refused] == 2
    lines = [r.getMessage() for r in caplog.records if "refused, no room" in r.getMessage()]
    assert [line.split(":")[0] for line in lines] == ["gpu-a", "gpu-a"]
    assert "report gpu-a-4 refused" in lines[1]
    assert "2 refused so far" in lines[1]

    delivery.failing_nodes.clear()  # Temporal takes them again
    await asyncio.sleep(0.005)
    for _ in range(4):
        await watcher._flush()
    assert delivery.sent == ["gpu-b-0", "gpu-a-0", "gpu-a-1", "gpu-a-2"]
    assert watcher.pending == 0


async def test_a_full_outbox_refuses_new_reports_of_any_node_with_a_count(
    dev_client: Client,
) -> None:
    metrics = WatcherMetrics()
    delivery = FlakyDelivery()
    watcher = flush_watcher(delivery, dev_client, metrics=metrics, max_pending=4)

    watcher._enqueue(report(f"gpu-{i}", 0) for i in range(6))

    assert watcher.pending == 4
    assert watcher.refused["outbox_full"] == 2
    refused = ("gpu_remediation_watcher_reports_refused_total", (("reason", "outbox_full"),))
    assert samples(metrics)[refused] == 2
    await watcher._flush()
    assert delivery.sent == [f"gpu-{i}-0" for i in range(4)]
