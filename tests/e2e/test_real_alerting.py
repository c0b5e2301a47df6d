"""The real alerting chain starts an incident: dcgm-exporter's series -> Prometheus ->
Alertmanager -> ``remediate receiver`` -> Temporal.

Debian's Prometheus (2.42) evaluates the shipped rules (deploy/monitoring/
prometheus-rule.yaml, as the chart renders them) over the simulated fleet's
dcgm-exporter endpoint (simulator/dcgm_exporter.py); Debian's Alertmanager (0.25)
routes and groups with the configuration of docs/getting-started.md ("Alertmanager and
the alert rules"), read from the document itself, bearer token from a file. No worker
runs: the incident is checked by the evidence it was started with.

A tenant's pod exporting ``DCGM_FI_DEV_XID_ERRORS`` with a node's name and the
exporter's own job and namespace labels is scraped as a tenant's target: Prometheus
keeps its target's labels (``honor_labels`` off) and the rule, which reads the
exporter's job and namespace only, does not fire for it.

Without the two programs (apt-get install prometheus prometheus-alertmanager, which
.ci/run does) the test skips and says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from demo.child_process import log_tail, stop_group
from demo.server import free_port
from gpu_remediation.evidence_history import received_reports
from gpu_remediation.ids import node_workflow_id
from simulator.dcgm_exporter import DcgmExporter
from simulator.fleet import Fleet, FleetConfig, PoolSpec
from tests.conftest import assert_eventually
from tests.deploy.chart_support import DEPLOY

pytestmark = pytest.mark.timeout(180)

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "getting-started.md"
RULES = DEPLOY / "monitoring" / "prometheus-rule.yaml"
TOKEN = "real-alerting-token-0123456789abcdef"
EXPORTER_JOB = "nvidia-dcgm-exporter"
EXPORTER_NAMESPACE = "gpu-operator"


def _program(*names: str) -> str:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    pytest.skip(
        f"no {names[0]} on this machine (Debian: apt-get install prometheus "
        "prometheus-alertmanager): the real alerting test needs both"
    )


def _guide_alertmanager_config() -> dict[str, Any]:
    """The Alertmanager configuration the getting-started guide tells users to write."""
    text = GUIDE.read_text()
    marker = "Alertmanager configuration (the token in a file mounted into Alertmanager):"
    block = re.search(re.escape(marker) + r"\s*```yaml\n(.*?)```", text, re.S)
    assert block, f"{GUIDE} has no Alertmanager configuration block after {marker!r}"
    config: dict[str, Any] = yaml.safe_load(block.group(1))
    return config


def _http_json(url: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
    request.add_header("Content-Type", "application/json")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=5) as response:
        raw = response.read()
    return json.loads(raw) if raw else None


def _ready(url: str) -> bool:
    try:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(url, timeout=2) as response:
            return int(response.status) == 200
    except OSError:
        return False


class TenantExporter:
    """A tenant's pod exporting a DCGM series of its own making, named after a node."""

    def __init__(self, node: str) -> None:
        self.value = 0
        tenant = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # the stdlib's name
                body = (
                    "# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n"
                    f'DCGM_FI_DEV_XID_ERRORS{{gpu="0",Hostname="{node}",'
                    f'job="{EXPORTER_JOB}",namespace="{EXPORTER_NAMESPACE}"}} {tenant.value}\n'
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self._server.server_port}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@dataclass
class Chain:
    """The running chain and what a test needs of it."""

    fleet: Fleet
    tenant: TenantExporter
    cluster: str
    prometheus: str
    alertmanager: str
    logs: Path

    def logs_tail(self) -> str:
        return "\n".join(
            f"--- {name}\n{log_tail(self.logs / name, 1500)}"
            for name in ("prometheus.log", "alertmanager.log", "receiver.log")
        )


@contextlib.contextmanager
def _fleet() -> Iterator[Fleet]:
    # Real time (factor 1) and no random faults: only the test's fault happens.
    fleet = Fleet(FleetConfig(pools=[PoolSpec(name="h100", nodes=3)], time_factor=1.0, seed=3))
    fleet.start()
    try:
        yield fleet
    finally:
        fleet.stop()


def _spawn(
    args: list[str], log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


@pytest_asyncio.fixture
async def chain(dev_env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[Chain]:
    prometheus_bin = _program("prometheus")
    alertmanager_bin = _program("prometheus-alertmanager", "alertmanager")
    cluster = f"alerting-{uuid.uuid4().hex[:8]}"
    processes: list[subprocess.Popen[bytes]] = []
    receiver_port, am_port, prom_port = free_port(), free_port(), free_port()
    with _fleet() as fleet, DcgmExporter(fleet) as exporter:
        tenant = TenantExporter(node="h100-0002")
        try:
            # remediate receiver, the production command, on the session's dev server.
            env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "GPU_"))}
            env["GPU_REMEDIATION_RECEIVER_TOKEN"] = TOKEN
            processes.append(
                _spawn(
                    [
                        str(Path(sys.executable).with_name("remediate")),
                        "receiver",
                        "--port",
                        str(receiver_port),
                        "--cluster",
                        cluster,
                        "--address",
                        dev_env.client.service_client.config.target_host,
                        "--namespace",
                        dev_env.client.namespace,
                        "--task-queue",
                        f"tq-{cluster}",
                    ],
                    tmp_path / "receiver.log",
                    env,
                )
            )
            # Alertmanager with the guide's configuration; only the receiver's address
            # and the token file's path are this machine's.
            token_file = tmp_path / "token"
            token_file.write_text(TOKEN)
            config = _guide_alertmanager_config()
            assert len(config["route"]["routes"]) == 1, "the guide routes to the receiver once"
            [receiver] = config["receivers"]
            [webhook] = receiver["webhook_configs"]
            webhook["url"] = f"http://127.0.0.1:{receiver_port}/v1/alerts"
            webhook["http_config"]["authorization"]["credentials_file"] = str(token_file)
            # What the guide leaves to the user's own configuration: the root route's
            # default receiver (the health alerts end there) and the grouping pace.
            config["route"]["receiver"] = "default"
            config["route"]["group_interval"] = "1s"
            config["receivers"].append({"name": "default"})
            (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump(config))
            processes.append(
                _spawn(
                    [
                        alertmanager_bin,
                        f"--config.file={tmp_path / 'alertmanager.yml'}",
                        f"--storage.path={tmp_path / 'am-data'}",
                        f"--web.listen-address=127.0.0.1:{am_port}",
                        "--cluster.listen-address=",
                    ],
                    tmp_path / "alertmanager.log",
                )
            )
            # Prometheus with the shipped rules; the scrape jobs give each target the
            # labels a ServiceMonitor would (job, namespace).
            (rule,) = (d for d in yaml.safe_load_all(RULES.read_text()) if d)
            (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
            prometheus_config = {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(tmp_path / "rules.yml")],
                "alerting": {
                    "alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]
                },
                "scrape_configs": [
                    {
                        "job_name": EXPORTER_JOB,
                        "static_configs": [
                            {
                                "targets": [exporter.target],
                                "labels": {"namespace": EXPORTER_NAMESPACE},
                            }
                        ],
                    },
                    {
                        "job_name": "tenant-pods",
                        "static_configs": [
                            {"targets": [tenant.target], "labels": {"namespace": "team-a"}}
                        ],
                    },
                ],
            }
            (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(prometheus_config))
            processes.append(
                _spawn(
                    [
                        prometheus_bin,
                        f"--config.file={tmp_path / 'prometheus.yml'}",
                        f"--storage.tsdb.path={tmp_path / 'prom-data'}",
                        f"--web.listen-address=127.0.0.1:{prom_port}",
                    ],
                    tmp_path / "prometheus.log",
                )
            )
            running = Chain(
                fleet=fleet,
                tenant=tenant,
                cluster=cluster,
                prometheus=f"http://127.0.0.1:{prom_port}",
                alertmanager=f"http://127.0.0.1:{am_port}",
                logs=tmp_path,
            )
            for url in (
                f"http://127.0.0.1:{receiver_port}/readyz",
                f"{running.alertmanager}/-/ready",
                f"{running.prometheus}/-/ready",
            ):
                await assert_eventually(
                    lambda url=url: asyncio.to_thread(_ready, url),
                    bool,
                    timeout=60,
                    interval=0.2,
                    message=f"{url} answers\n{running.logs_tail()}",
                )
            yield running
        finally:
            tenant.stop()
            for process in reversed(processes):
                await stop_group(process, 5.0, 5.0)
            for node in ("h100-0000", "h100-0001", "h100-0002"):
                handle = dev_env.client.get_workflow_handle(node_workflow_id(cluster, node))
                with contextlib.suppress(RPCError):
                    await handle.terminate(reason="end of the real alerting test")


async def _sample_count(chain: Chain, query: str) -> int:
    url = f"{chain.prometheus}/api/v1/query?query={urllib.request.quote(query)}"
    answer = await asyncio.to_thread(_http_json, url)
    return len(answer["data"]["result"])


async def _firing(chain: Chain) -> list[dict[str, str]]:
    answer = await asyncio.to_thread(_http_json, f"{chain.prometheus}/api/v1/alerts")
    return [
        a["labels"] for a in answer["data"]["alerts"] if a["labels"]["alertname"] == "GpuXidError"
    ]


async def _evidence(dev_env: WorkflowEnvironment, cluster: str, node: str) -> list[Any]:
    handle = dev_env.client.get_workflow_handle(node_workflow_id(cluster, node))
    try:
        description = await handle.describe()
    except RPCError:
        return []
    assert description.status == WorkflowExecutionStatus.RUNNING
    history = await handle.fetch_history()
    return [report for report, _ in received_reports(history.events)]


async def test_an_xid_on_a_node_opens_its_incident_through_prometheus_and_alertmanager(
    dev_env: WorkflowEnvironment, chain: Chain
) -> None:
    # changes() needs a sample before the fault: wait for the exporter's first scrapes.
    await assert_eventually(
        lambda: _sample_count(chain, f'DCGM_FI_DEV_XID_ERRORS{{job="{EXPORTER_JOB}"}}'),
        lambda n: n == 3 * 8,
        timeout=30,
        interval=0.5,
        message="Prometheus scraped the fleet's 24 GPUs",
    )
    await assert_eventually(
        lambda: _sample_count(chain, 'DCGM_FI_DEV_XID_ERRORS{job="tenant-pods"}'),
        lambda n: n == 1,
        timeout=30,
        interval=0.5,
        message="Prometheus scraped the tenant's series",
    )
    chain.fleet.inject("fallen_off_bus", "h100-0001", gpu=5)
    chain.tenant.value = 79

    reports = await assert_eventually(
        lambda: _evidence(dev_env, chain.cluster, "h100-0001"),
        bool,
        timeout=60,
        interval=0.5,
        message=f"the incident of h100-0001 started\n{chain.logs_tail()}",
    )
    [report] = reports
    assert report.node == "h100-0001"
    assert "79" in report.model_dump_json()

    # By now the tenant's series had changed as long as the real one had: it fired nothing.
    firing = await _firing(chain)
    assert [a["Hostname"] for a in firing] == ["h100-0001"], firing
    tenant_series = await asyncio.to_thread(
        _http_json,
        f"{chain.prometheus}/api/v1/query?query="
        + urllib.request.quote('DCGM_FI_DEV_XID_ERRORS{job="tenant-pods"}'),
    )
    [series] = tenant_series["data"]["result"]
    assert series["metric"]["exported_job"] == EXPORTER_JOB  # renamed, not trusted
    assert series["metric"]["namespace"] == "team-a"
    assert await _evidence(dev_env, chain.cluster, "h100-0002") == []


async def test_alertmanagers_own_payload_parses_with_an_empty_generator_url(
    dev_env: WorkflowEnvironment, chain: Chain
) -> None:
    # An alert posted to Alertmanager's API without generatorURL (as amtool and other
    # senders do): Alertmanager 0.25 forwards it with an empty one.
    labels = {
        "alertname": "GpuXidError",
        "remediate": "true",
        "namespace": EXPORTER_NAMESPACE,
        "Hostname": "h100-0000",
        "gpu": "2",
        "severity": "critical",
        "metric": "DCGM_FI_DEV_XID_ERRORS",
    }
    await asyncio.to_thread(
        _http_json,
        f"{chain.alertmanager}/api/v2/alerts",
        [{"labels": labels, "annotations": {"xid": "48", "summary": "Xid 48 on GPU 2"}}],
    )
    reports = await assert_eventually(
        lambda: _evidence(dev_env, chain.cluster, "h100-0000"),
        bool,
        timeout=60,
        interval=0.5,
        message=f"the incident of h100-0000 started\n{chain.logs_tail()}",
    )
    assert reports[0].node == "h100-0000"
