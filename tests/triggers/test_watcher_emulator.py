"""The watcher against the Kubernetes API emulator (real HTTP) and a real Temporal dev server.

No worker runs here: each incident the watcher starts stays open, and the
evidence it received is read back from its history.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from gpu_remediation.ids import node_workflow_id
from simulator.kube_api import NODES
from tests.conftest import assert_eventually
from tests.triggers.watcher_support import (
    GPU_LABELS,
    Emulator,
    conditions_of,
    emulator,
    evidence_reports,
    evidence_signals,
    make_watcher,
    new_cluster,
    running,
    terminate_incidents,
    watcher_policy,
)
from triggers.watcher import NodeConditionWatcher

XID_79 = "Xid 79 on GPU 3 (0000:53:00): reboot required"
XID_48 = "Xid 48 on GPU 1 (0000:1b:00): GPU reset required"


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with emulator() as e:
        yield e


def gpu_problem(emu: Emulator, node: str, message: str = XID_79, status: str = "True") -> None:
    emu.store.set_node_condition(
        node, "GpuHealthProblem", status, reason="GpuXidError", message=message
    )


def transition_time(node: dict[str, object], type_: str) -> datetime:
    conditions = node["status"]["conditions"]  # type: ignore[index]
    (found,) = [c for c in conditions if c["type"] == type_]
    return datetime.fromisoformat(found["lastTransitionTime"])


async def tracked_nodes(watcher: NodeConditionWatcher) -> set[str]:
    return {e.node for e in watcher.tracker.episodes()}


async def lists(watcher: NodeConditionWatcher) -> int:
    return watcher.source.lists


async def test_only_nodes_matching_the_selector_are_watched(
    emu: Emulator, dev_client: Client, task_queue: str
) -> None:
    cluster = new_cluster()
    emu.store.put_node("gpu-a", labels=GPU_LABELS)
    emu.store.put_node("cpu-b")
    emu.store.put_node("gpu-m", labels=GPU_LABELS)
    gpu_problem(emu, "gpu-a")
    gpu_problem(emu, "cpu-b")
    with emu.api_client() as api:
        watcher = make_watcher(
            api, dev_client, watcher_policy(), cluster=cluster, task_queue=task_queue
        )
        async with running(watcher):
            await assert_eventually(
                lambda: evidence_reports(dev_client, cluster, "gpu-a"), lambda r: len(r) == 1
            )
            # One ordered stream: once gpu-a's later change is in, cpu-b's was seen too.
            gpu_problem(emu, "cpu-b", XID_48)
            gpu_problem(emu, "gpu-a", XID_48)
            await assert_eventually(
                lambda: evidence_reports(dev_client, cluster, "gpu-a"), lambda r: len(r) == 2
            )
            assert await evidence_reports(dev_client, cluster, "cpu-b") == []

            # Gaining the label brings a node in ...
            emu.store.mutate(
                NODES, "cpu-b", None, lambda n: n["metadata"]["labels"].update(GPU_LABELS)
            )
            await assert_eventually(
                lambda: evidence_reports(dev_client, cluster, "cpu-b"), lambda r: len(r) == 1
            )
            # ... losing it, or being deleted, drops it without a report.
            emu.store.mutate(
                NODES,
                "gpu-a",
                None,
                lambda n: n["metadata"]["labels"].pop("nvidia.com/gpu.present"),
            )
            emu.store.delete_object(NODES, "cpu-b")
            await assert_eventually(lambda: tracked_nodes(watcher), lambda nodes: nodes == set())
            gpu_problem(emu, "gpu-a", status="False")  # not selected: its recovery is not ours
            gpu_problem(emu, "gpu-m")
            await assert_eventually(
                lambda: evidence_reports(dev_client, cluster, "gpu-m"), lambda r: len(r) == 1
            )
        a_reports = conditions_of(await evidence_reports(dev_client, cluster, "gpu-a"))
    assert [(e.message, e.cleared) for e in a_reports] == [(XID_79, False), (XID_48, False)]
    node_requests = [r for r in emu.api.requests() if r.path == "/api/v1/nodes"]
    assert node_requests
    assert all("labelSelector=nvidia.com%2Fgpu.present%3Dtrue" in r.query for r in node_requests)
    await terminate_incidents(dev_client, cluster, "gpu-a", "cpu-b", "gpu-m")


async def test_a_condition_is_reported_after_its_grace_and_its_recovery_follows(
    emu: Emulator, dev_client: Client, task_queue: str
) -> None:
    cluster = new_cluster()
    emu.store.put_node("gpu-g", labels=GPU_LABELS)
    with emu.api_client() as api:
        watcher = make_watcher(
            api, dev_client, watcher_policy(Ready="2s"), cluster=cluster, task_queue=task_queue
        )
        async with running(watcher):
            await assert_eventually(lambda: lists(watcher), lambda n: n == 1)
            since = transition_time(emu.store.set_node_ready("gpu-g", False), "Ready")
            await assert_eventually(lambda: tracked_nodes(watcher), lambda n: n == {"gpu-g"})
            assert await evidence_reports(dev_client, cluster, "gpu-g") == []  # within its grace
            ((report, received),) = await assert_eventually(
                lambda: evidence_signals(dev_client, cluster, "gpu-g"), lambda s: len(s) == 1
            )
            (evidence,) = conditions_of([report])
            assert (evidence.type, evidence.status, evidence.cleared) == ("Ready", "False", False)
            # The clock starts at the transition (the API keeps whole seconds).
            assert since <= evidence.observed_at < since + timedelta(seconds=1)
            assert received - evidence.observed_at >= timedelta(seconds=2)

            emu.store.set_node_ready("gpu-g", True)
            reports = await assert_eventually(
                lambda: evidence_reports(dev_client, cluster, "gpu-g"), lambda r: len(r) == 2
            )
    clear = conditions_of(reports)[1]
    assert (clear.status, clear.cleared) == ("True", True)
    assert reports[1].report_id == reports[0].report_id + ":cleared"
    await terminate_incidents(dev_client, cluster, "gpu-g")


async def test_a_flapping_condition_is_reported_from_its_first_sighting(
    emu: Emulator, dev_client: Client, task_queue: str
) -> None:
    cluster = new_cluster()
    emu.store.put_node("gpu-f", labels=GPU_LABELS)
    with emu.api_client() as api:
        watcher = make_watcher(
            api, dev_client, watcher_policy(Ready="2s"), cluster=cluster, task_queue=task_queue
        )
        async with running(watcher):
            await assert_eventually(lambda: lists(watcher), lambda n: n == 1)
            first = transition_time(emu.store.set_node_ready("gpu-f", False), "Ready")

            async def episode_problem() -> bool | None:
                found = [e.problem for e in watcher.tracker.episodes() if e.node == "gpu-f"]
                return found[0] if found else None

            await assert_eventually(episode_problem, lambda p: p is True)
            emu.store.set_node_ready("gpu-f", True)
            await assert_eventually(episode_problem, lambda p: p is False)

            # The kubelet stamps the next flip with a later transition time.
            async def store_now() -> datetime:
                return datetime.fromisoformat(emu.store.now())

            await assert_eventually(store_now, lambda t: t >= first + timedelta(seconds=1))
            again = transition_time(emu.store.set_node_ready("gpu-f", False), "Ready")
            assert again > first
            ((report, received),) = await assert_eventually(
                lambda: evidence_signals(dev_client, cluster, "gpu-f"), lambda s: len(s) == 1
            )
    (evidence,) = conditions_of([report])
    assert evidence.observed_at < again  # the clock kept the first sighting
    assert received - evidence.observed_at >= timedelta(seconds=2)
    await terminate_incidents(dev_client, cluster, "gpu-f")


async def test_a_410_gone_answer_makes_the_watcher_list_again_and_resume(
    emu: Emulator, dev_client: Client, task_queue: str
) -> None:
    cluster = new_cluster()
    emu.store.put_node("gpu-x", labels=GPU_LABELS)
    gone = emu.api.faults.inject(r"^/api/v1/nodes$", query="watch=", status=410, times=1)
    with emu.api_client() as api:
        watcher = make_watcher(
            api, dev_client, watcher_policy(), cluster=cluster, task_queue=task_queue
        )
        async with running(watcher):
            await assert_eventually(lambda: lists(watcher), lambda n: n == 2)
            gpu_problem(emu, "gpu-x")
            await assert_eventually(
                lambda: evidence_reports(dev_client, cluster, "gpu-x"), lambda r: len(r) == 1
            )
    assert gone.hits == 1
    calls = [
        ("watch" if "watch=" in r.query else "list", r.status)
        for r in emu.api.requests()
        if r.path == "/api/v1/nodes"
    ]
    assert calls[:4] == [("list", 200), ("watch", 410), ("list", 200), ("watch", 200)]
    await terminate_incidents(dev_client, cluster, "gpu-x")


async def test_the_watcher_survives_api_restarts_and_a_compacted_history(
    emu: Emulator, dev_client: Client, task_queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gpu_remediation.watcher")
    cluster = new_cluster()
    emu.store.put_node("gpu-r1", labels=GPU_LABELS)
    emu.store.put_node("gpu-r2", labels=GPU_LABELS)
    with emu.api_client() as api:
        watcher = make_watcher(
            api, dev_client, watcher_policy(), cluster=cluster, task_queue=task_queue
        )
        async with running(watcher):
            await assert_eventually(lambda: lists(watcher), lambda n: n == 1)
            # Down while a node turns bad: the watch resumes from its version.
            await asyncio.to_thread(emu.stop)
            gpu_problem(emu, "gpu-r1")
            emu.start()
            await assert_eventually(
                lambda: evidence_reports(dev_client, cluster, "gpu-r1"), lambda r: len(r) == 1
            )
            assert watcher.source.lists == 1
            # Down while the history is compacted: the version is gone (410), so it lists.
            await asyncio.to_thread(emu.stop)
            gpu_problem(emu, "gpu-r2")
            emu.store.compact()
            emu.start()
            await assert_eventually(
                lambda: evidence_reports(dev_client, cluster, "gpu-r2"), lambda r: len(r) == 1
            )
            assert watcher.source.lists == 2
    watcher_logs = [r for r in caplog.records if r.name == "gpu_remediation.watcher"]
    assert [r.getMessage() for r in watcher_logs if r.levelno >= logging.ERROR] == []
    assert any("410 Gone" in r.getMessage() for r in watcher_logs)
    await terminate_incidents(dev_client, cluster, "gpu-r1", "gpu-r2")


async def test_a_recovery_with_no_running_incident_starts_nothing(
    emu: Emulator, dev_client: Client, task_queue: str
) -> None:
    cluster = new_cluster()
    emu.store.put_node("gpu-c", labels=GPU_LABELS)
    gpu_problem(emu, "gpu-c")
    with emu.api_client() as api:
        watcher = make_watcher(
            api, dev_client, watcher_policy(), cluster=cluster, task_queue=task_queue
        )
        async with running(watcher):
            await assert_eventually(
                lambda: evidence_reports(dev_client, cluster, "gpu-c"), lambda r: len(r) == 1
            )
            await terminate_incidents(dev_client, cluster, "gpu-c")
            gpu_problem(emu, "gpu-c", status="False")

            async def delivered() -> list[str]:
                return [r.kind for r in watcher.delivered if r.node == "gpu-c"]

            await assert_eventually(delivered, lambda kinds: kinds == ["report", "clear"])
    handle = dev_client.get_workflow_handle(node_workflow_id(cluster, "gpu-c"))
    assert (await handle.describe()).status == WorkflowExecutionStatus.TERMINATED
