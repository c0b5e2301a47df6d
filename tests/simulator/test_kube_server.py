"""Server lifecycle: standalone CLI with a kubeconfig, clean shutdown, concurrency."""

from __future__ import annotations

import http.client
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch

from simulator.kube_api import KubeApiServer, KubeStore

ROOT = Path(__file__).resolve().parents[2]


def test_standalone_cli_with_kubeconfig(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "simulator.kube_api",
            "--port",
            "0",
            "--write-kubeconfig",
            str(kubeconfig),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        banner = [proc.stdout.readline() for _ in range(3)]
        assert banner[0].startswith("Kubernetes API emulator serving at http://127.0.0.1:")
        assert f"KUBECONFIG={kubeconfig}" in "".join(banner)
        api = config.new_client_from_config(config_file=str(kubeconfig))
        with api:
            core = client.CoreV1Api(api)
            core.create_node({"metadata": {"name": "n1"}})
            assert [n.metadata.name for n in core.list_node().items] == ["n1"]
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0


def test_stop_joins_every_thread_even_with_idle_keepalive_connections() -> None:
    baseline = set(threading.enumerate())
    store = KubeStore()
    with KubeApiServer(store) as api, api.api_client() as c:
        core = client.CoreV1Api(c)
        core.list_node()  # leaves a pooled keep-alive connection open
        api.stop()
        leftover = [t for t in threading.enumerate() if t not in baseline and t.is_alive()]
        assert leftover == []
    store.close()


def test_many_watches_do_not_block_requests(kube_api: KubeApiServer, core: Any) -> None:
    threads = []

    def follow() -> None:
        with kube_api.api_client() as c:
            for _ in watch.Watch().stream(
                client.CoreV1Api(c).list_pod_for_all_namespaces, timeout_seconds=3
            ):
                pass

    for _ in range(8):
        t = threading.Thread(target=follow)
        t.start()
        threads.append(t)
    deadline = time.monotonic() + 5
    while sum("watch=" in r.query for r in kube_api.requests()) < 8:
        assert time.monotonic() < deadline, "the watches never reached the server"
        time.sleep(0.01)
    for i in range(20):
        core.create_node({"metadata": {"name": f"n{i}"}})
    assert len(core.list_node().items) == 20
    kube_api.stop()  # ends the watches early
    for t in threads:
        t.join(timeout=5)
        assert not t.is_alive()


def test_chunked_request_bodies_are_read(kube_api: KubeApiServer) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", kube_api.port, timeout=5)
    try:
        parts = iter([b'{"metadata":', b'{"name":"n1"}}'])
        conn.request(
            "POST",
            "/api/v1/nodes",
            body=parts,
            headers={"Content-Type": "application/json"},
            encode_chunked=True,
        )
        created = conn.getresponse()
        assert created.status == 201
        created.read()
        conn.request("GET", "/api/v1/nodes/n1")  # the same connection still works
        assert conn.getresponse().status == 200
    finally:
        conn.close()
