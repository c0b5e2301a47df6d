"""Watch fan-out against the real emulator over HTTP: nothing lost, and a 410 shows as missing."""

import threading
import time

from kubernetes import client as k8s

from bench.kube_fanout import CommitLog, Follower, counts, run_followers
from simulator.kube_api import KubeApiServer, KubeStore


def _mutate(store: KubeStore, names: list[str], rounds: int, stop: threading.Event) -> None:
    for round_ in range(rounds):
        for name in names:
            if stop.is_set():
                return
            store.set_node_condition(name, "GpuHealthProblem", ("True", "False")[round_ % 2])
        time.sleep(0.01)


def test_every_watch_receives_every_node_change_once_and_in_order() -> None:
    store = KubeStore()
    log = CommitLog()
    store.add_hook(log.hook)
    names = [f"gpu-{i:03d}" for i in range(30)]
    for name in names:
        store.put_node(name)
    with KubeApiServer(store, bookmark_interval=0.2) as server, server.api_client() as api:
        core = k8s.CoreV1Api(api)
        followers = [Follower(f"nodes-{i}", core.list_node, watch_timeout=1) for i in range(3)]
        stop = threading.Event()
        writer = threading.Thread(target=_mutate, args=(store, names, 40, stop))
        writer.start()
        try:
            run_followers(followers, lambda: int(store.resource_version), load_s=2.0, grace_s=15)
        finally:
            stop.set()
            writer.join()
    store.close()
    result = counts(followers, log, {f.name: "nodes" for f in followers})
    assert all(c.committed > 20 for c in result), result
    assert [(c.missing, c.duplicates, c.unexpected, c.errors) for c in result] == [(0, 0, 0, 0)] * 3
    assert all(c.in_order for c in result)


def test_changes_compacted_before_a_watch_read_them_are_counted_missing() -> None:
    store = KubeStore()
    log = CommitLog()
    store.add_hook(log.hook)
    names = [f"gpu-{i}" for i in range(5)]
    for name in names:
        store.put_node(name)
    with KubeApiServer(store, bookmark_interval=0.2) as server, server.api_client() as api:
        follower = Follower("nodes-0", k8s.CoreV1Api(api).list_node, watch_timeout=1)

        def compact_behind_the_watch() -> int:
            # Under the store lock, so the watch cannot read these changes before they go.
            with store.lock:
                for name in names:
                    store.set_node_condition(name, "GpuHealthProblem", "True")
                store.compact()
            return int(store.resource_version)

        run_followers([follower], compact_behind_the_watch, load_s=1.0, grace_s=15)
    store.close()
    (result,) = counts([follower], log, {"nodes-0": "nodes"})
    assert result.expired == 1
    assert result.missing == len(names)
