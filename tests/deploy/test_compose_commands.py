"""The compose file's commands, run as they are written, in their non-container form.

No Docker engine runs here, so each service of docker-compose.yml runs as a
process: the image's entrypoint (``remediate``) with the service's command and
environment, interpolated from a .env's worth of values. What a container
would see differently is mapped, and only that: bind-mount targets to their
sources, the compose network's ``temporal:7233`` to the dev server, container
ports to free local ports. Modules of the test and simulator extras cannot be
imported (the image has none of them). The services must come up healthy by
their own compose healthchecks, serve, log JSON only, and stop on SIGTERM.

Also: the compose file's Temporal setup script against the dev server, with
the ``temporal`` CLI the admin-tools image would run.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import sysconfig
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from demo.server import free_port
from gpu_remediation.ids import Queries, node_workflow_id
from gpu_remediation.search_attributes import ALL_SEARCH_ATTRIBUTES
from simulator.kube_api import KubeApiServer, KubeStore
from tests.conftest import assert_eventually
from tests.deploy.compose_support import bind_mounts, interpolated
from tests.deploy.support import DEPLOY, REPO, http_get, parse_json_lines

# The image installs no extras: importing these would fail in a container.
EXTRAS_ONLY = ("moto", "pytest", "_pytest", "hypothesis", "httpx", "flask", "werkzeug")
LAUNCHER = f"""
import importlib.abc, sys
class _NotInImage(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {EXTRAS_ONLY!r}:
            raise ImportError(name + ' is not installed in the service image')
        return None
sys.meta_path.insert(0, _NotInImage())
from cli.main import app
app()
"""
TOKEN = "compose-test-token-0123456789abcdef"
NPD_MESSAGE = "Xid 79 on GPU 2 (0000:53:00): GPU has fallen off the bus, reboot required"


@dataclass
class Service:
    name: str
    argv: list[str]
    env: dict[str, str]
    healthcheck: list[str]
    ports: dict[int, int] = field(default_factory=dict)
    process: asyncio.subprocess.Process | None = None
    stderr: str = ""

    def port(self, container_port: int) -> int:
        return self.ports[container_port]


def _remap(value: str, mounts: dict[str, str], ports: dict[int, int], temporal: str) -> str:
    for target, source in mounts.items():
        value = value.replace(target, source)
    value = value.replace("temporal:7233", temporal)
    for inside, outside in ports.items():
        value = re.sub(rf"(0\.0\.0\.0|127\.0\.0\.1):{inside}\b", f"127.0.0.1:{outside}", value)
    return value


def service(compose: dict[str, Any], name: str, temporal: str) -> Service:
    spec = compose["services"][name]
    mounts = {
        target: str((REPO / source).resolve()) if not Path(source).is_absolute() else source
        for source, target, _ in bind_mounts(spec)
    }
    command: list[str] = list(spec["command"])
    health = " ".join(spec["healthcheck"]["test"])
    inside = {int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)/", health)}
    inside |= {
        int(v.rsplit(":", 1)[1]) for k, v in spec["environment"].items() if k.endswith("_BIND")
    }
    if "--port" in command:
        inside.add(int(command[command.index("--port") + 1]))
    ports = {p: free_port() for p in inside}
    argv = []
    for i, arg in enumerate(command):
        if i and command[i - 1] == "--port":
            arg = str(ports[int(arg)])
        elif i and command[i - 1] == "--host":
            arg = "127.0.0.1"
        argv.append(_remap(arg, mounts, ports, temporal))
    base = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("TEMPORAL_", "GPU_REMEDIATION_", "AWS_", "KUBECONFIG"))
    }
    env = base | {
        k: _remap(str(v), mounts, ports, temporal) for k, v in spec["environment"].items()
    }
    healthcheck = [
        sys.executable if part == "python" else _remap(part, mounts, ports, temporal)
        for part in spec["healthcheck"]["test"][1:]
    ]
    return Service(name, [sys.executable, "-c", LAUNCHER, *argv], env, healthcheck, ports)


@dataclass
class Stack:
    services: dict[str, Service]
    client: Client
    cluster: str
    task_queue: str
    kube: KubeApiServer


@pytest_asyncio.fixture
async def stack(dev_env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[Stack]:
    store = KubeStore()
    gpu = {"nvidia.com/gpu.present": "true"}
    store.put_node("gpu-1", node_pool="h100", labels=gpu, boot_id="boot-0")
    store.put_node(
        "gpu-2",
        node_pool="h100",
        labels=gpu,
        conditions=[
            {
                "type": "GpuHealthProblem",
                "status": "True",
                "reason": "GpuHealthCheckFailed",
                "message": NPD_MESSAGE,
            }
        ],
    )
    with KubeApiServer(store) as kube:
        kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
        aws = tmp_path / "aws"
        aws.mkdir()
        (aws / "config").write_text("[default]\nregion = us-west-2\n")
        (aws / "credentials").write_text(
            "[default]\naws_access_key_id = testing\naws_secret_access_key = testing\n"
        )
        # Incidents run in dry run here: they read the cluster and change nothing.
        policy = tmp_path / "policy.yaml"
        policy.write_text("dry_run: true\n")
        cluster = f"c{uuid.uuid4().hex[:8]}"
        task_queue = f"tq-{uuid.uuid4()}"
        values = {
            "POSTGRES_PASSWORD": "unused-here",
            "GPU_REMEDIATION_RECEIVER_TOKEN": TOKEN,
            "GPU_REMEDIATION_CLUSTER": cluster,
            "GPU_REMEDIATION_AWS_REGION": "us-west-2",
            "GPU_REMEDIATION_TASK_QUEUE": task_queue,
            "GPU_REMEDIATION_POLICY": str(policy),
            "WORKER_KUBECONFIG": str(kubeconfig),
            "WATCHER_KUBECONFIG": str(kubeconfig),
            "AWS_CONFIG_DIR": str(aws),
            "TEMPORAL_NAMESPACE": dev_env.client.namespace,
            "HOME": str(tmp_path),
        }
        compose = interpolated(values)
        temporal = dev_env.client.service_client.config.target_host
        services = {
            name: service(compose, name, temporal) for name in ("worker", "receiver", "watcher")
        }
        # Never the real AWS: a closed local port stands in (dry run makes no AWS call).
        services["worker"].env["GPU_REMEDIATION_AWS_ENDPOINT_URL"] = (
            f"http://127.0.0.1:{free_port()}"
        )
        services["worker"].env["AWS_EC2_METADATA_DISABLED"] = "true"
        for svc in services.values():
            svc.process = await asyncio.create_subprocess_exec(
                *svc.argv,
                cwd=tmp_path,
                env=svc.env,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        try:
            yield Stack(services, dev_env.client, cluster, task_queue, kube)
        finally:
            for svc in services.values():
                assert svc.process is not None
                if svc.process.returncode is None:
                    svc.process.kill()
                    await svc.process.wait()
    store.close()


async def healthy(svc: Service) -> None:
    async def check() -> int:
        assert svc.process is not None
        if svc.process.returncode is not None:
            _, err = await svc.process.communicate()
            raise AssertionError(f"{svc.name} exited {svc.process.returncode}: {err.decode()}")
        result = await asyncio.to_thread(
            subprocess.run, svc.healthcheck, capture_output=True, check=False
        )
        return result.returncode

    await assert_eventually(
        check, lambda code: code == 0, timeout=60, interval=0.3, message=f"{svc.name} healthy"
    )


async def stop(svc: Service) -> int:
    assert svc.process is not None
    svc.process.send_signal(signal.SIGTERM)
    _, err = await asyncio.wait_for(svc.process.communicate(), timeout=60)
    svc.stderr = err.decode()
    assert svc.process.returncode is not None
    return svc.process.returncode


def alert(node: str) -> bytes:
    return json.dumps(
        {
            "version": "4",
            "groupKey": "{}",
            "status": "firing",
            "receiver": "gpu-remediation",
            "alerts": [
                {
                    "status": "firing",
                    "fingerprint": "0123456789abcdef",
                    "labels": {
                        "alertname": "GpuXidError",
                        "hostname": node,
                        "xid": "79",
                        "gpu": "2",
                    },
                    "startsAt": "2026-12-03T10:00:00Z",
                    "endsAt": "0001-01-01T00:00:00Z",
                }
            ],
        }
    ).encode()


async def post(url: str, body: bytes) -> tuple[int, dict[str, Any]]:
    import urllib.request

    request = urllib.request.Request(
        url,
        data=body,
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )

    def send() -> tuple[int, dict[str, Any]]:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())

    return await asyncio.to_thread(send)


@pytest.mark.timeout(120)
async def test_the_compose_services_start_healthy_serve_log_json_and_stop(stack: Stack) -> None:
    worker, receiver, watcher = (stack.services[n] for n in ("worker", "receiver", "watcher"))
    await asyncio.gather(*(healthy(s) for s in stack.services.values()))
    for svc, port in ((worker, 8081), (receiver, 8080), (watcher, 8081)):
        status, body = await asyncio.to_thread(
            http_get, f"http://127.0.0.1:{svc.port(port)}/readyz"
        )
        assert status == 200, (svc.name, body)

    # The receiver opens gpu-1's incident; the watcher reports gpu-2's NPD condition.
    status, answer = await post(f"http://127.0.0.1:{receiver.port(8080)}/v1/alerts", alert("gpu-1"))
    assert status == 200
    assert answer["delivered"] == 1
    for node in ("gpu-1", "gpu-2"):
        handle = stack.client.get_workflow_handle(node_workflow_id(stack.cluster, node))

        async def decisions(h: Any = handle) -> int:
            try:
                state = await h.query(Queries.STATE)
            except Exception:
                return 0
            return len(state["decisions"])

        # A state with decisions: the worker from the compose file runs the incident.
        await assert_eventually(decisions, lambda n: n > 0, timeout=30, interval=0.2)

    _, worker_metrics = await asyncio.to_thread(
        http_get, f"http://127.0.0.1:{worker.port(9464)}/metrics"
    )
    assert "temporal_workflow_task_execution_latency" in worker_metrics
    _, watcher_metrics = await asyncio.to_thread(
        http_get, f"http://127.0.0.1:{watcher.port(8081)}/metrics"
    )
    assert 'gpu_remediation_watcher_reports_total{kind="report"} 1.0' in watcher_metrics
    _, receiver_metrics = await asyncio.to_thread(
        http_get, f"http://127.0.0.1:{receiver.port(8080)}/metrics"
    )
    assert 'gpu_remediation_receiver_alerts_total{outcome="delivered"} 1.0' in receiver_metrics

    codes = {svc.name: await stop(svc) for svc in (watcher, receiver, worker)}
    assert codes["worker"] == 0
    assert codes["watcher"] == 0
    assert codes["receiver"] in (0, -signal.SIGTERM)  # uvicorn re-raises the signal

    for svc in (worker, receiver, watcher):
        lines = parse_json_lines(svc.stderr)
        assert lines, f"{svc.name} logged nothing"
        for line in lines:
            assert {
                "time",
                "level",
                "logger",
                "message",
                "node",
                "workflow_id",
                "rung",
            } <= line.keys()
    reports = [line for line in parse_json_lines(watcher.stderr) if line["node"] == "gpu-2"]
    assert reports
    assert reports[0]["workflow_id"] == node_workflow_id(stack.cluster, "gpu-2")
    from_activities = [line for line in parse_json_lines(worker.stderr) if "activity" in line]
    assert all(line["node"] in ("gpu-1", "gpu-2", None) for line in from_activities)


async def test_the_setup_script_creates_the_namespace_and_registers_the_search_attributes(
    dev_env: WorkflowEnvironment,
) -> None:
    namespace = f"ns-{uuid.uuid4().hex[:8]}"
    env = {
        "PATH": f"{sysconfig.get_path('scripts')}{os.pathsep}{os.environ['PATH']}",
        "TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host,
        "TEMPORAL_NAMESPACE": namespace,
        "TEMPORAL_SETUP_WAIT_S": "60",
    }
    script = str(DEPLOY / "compose" / "temporal-setup.sh")
    for _ in range(2):  # the second run finds everything in place
        result = await asyncio.to_thread(
            subprocess.run, ["sh", script], env=env, capture_output=True, text=True, check=False
        )
        assert result.returncode == 0, result.stdout + result.stderr
    from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest

    registered = await dev_env.client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    assert {key.name for key in ALL_SEARCH_ATTRIBUTES} <= set(registered.custom_attributes)
