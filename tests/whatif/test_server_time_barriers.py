"""Before the clock-free comparison's clock moves on, the watcher has acted on every change."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from temporalio.client import Client

from simulator.kube_api import NODES
from tests.triggers.watcher_support import (
    GPU_LABELS,
    Emulator,
    emulator,
    evidence_reports,
    make_watcher,
    new_cluster,
    running,
    watcher_policy,
)
from whatif.server_time import caught_up

XID_79 = "Xid 79 on GPU 3 (0000:53:00): reboot required"


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with emulator() as e:
        yield e


@pytest.mark.integration
async def test_once_the_barrier_passes_the_condition_just_set_is_an_incident(
    emu: Emulator, dev_client: Client, task_queue: str
) -> None:
    cluster = new_cluster()
    emu.store.put_node("gpu-a", labels=GPU_LABELS)
    with emu.api_client() as api:
        watcher = make_watcher(
            api, dev_client, watcher_policy(), cluster=cluster, task_queue=task_queue
        )
        async with running(watcher):
            barrier = caught_up(lambda: watcher.source, lambda: watcher, emu.store, NODES.key)
            await barrier()  # the first list is in
            emu.store.set_node_condition(
                "gpu-a", "GpuHealthProblem", "True", reason="GpuXidError", message=XID_79
            )
            await barrier()
            # No waiting here: the barrier itself waited for the watch, the watcher's
            # round and its delivery to Temporal.
            assert watcher.source.delivered_version >= emu.store.latest_version(NODES.key)
            assert len(await evidence_reports(dev_client, cluster, "gpu-a")) == 1


@pytest.mark.integration
def test_the_store_knows_each_resources_last_version() -> None:
    with emulator() as emu:
        assert emu.store.latest_version(NODES.key) == 0
        emu.store.put_node("n1")
        first = emu.store.latest_version(NODES.key)
        emu.store.put_node("n2")
        assert emu.store.latest_version(NODES.key) > first
        assert emu.store.latest_version("pods") == 0
