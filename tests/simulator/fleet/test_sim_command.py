"""``remediate sim``: serves the fleet, says how to reach it, stops cleanly on Ctrl-C."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import boto3
from kubernetes import client, config
from typer.testing import CliRunner

from cli.main import app

ROOT = Path(__file__).resolve().parents[3]
runner = CliRunner(env={"COLUMNS": "200", "NO_COLOR": "1"})


def test_the_printed_endpoints_serve_kubectl_clients_and_boto3(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cli.main",
            "sim",
            "--pools",
            "h100:3,p5:2:no-reset",
            "--time-factor",
            "60",
            "--status-every",
            "0",
            "--out-dir",
            str(tmp_path),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert process.stdout is not None
    try:
        lines = []
        for line in process.stdout:
            lines.append(line)
            if "Ctrl-C" in line:
                break
        printed = "".join(lines)
        kubeconfig = tmp_path / "kubeconfig"
        assert f"KUBECONFIG={kubeconfig} kubectl get nodes" in printed, printed
        endpoint = re.search(r"AWS \(moto\)\s+(http://\S+)", printed)
        assert endpoint is not None, printed

        api = config.new_client_from_config(str(kubeconfig))
        with api:
            nodes = client.CoreV1Api(api).list_node(label_selector="karpenter.sh/nodepool=p5")
        assert sorted(n.metadata.name for n in nodes.items) == ["p5-0000", "p5-0001"]
        ec2 = boto3.client(
            "ec2",
            endpoint_url=endpoint.group(1),
            region_name="us-west-2",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        ids = {n.spec.provider_id.rsplit("/", 1)[1] for n in nodes.items}
        found = ec2.describe_instances(InstanceIds=sorted(ids))["Reservations"]
        assert {i["InstanceId"] for r in found for i in r["Instances"]} == ids
        assert "AWS_ENDPOINT_URL=" in (tmp_path / "sim.env").read_text()
    finally:
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=30)
    assert process.returncode == 0, rest
    assert "stopped." in rest


def test_bad_options_are_refused_with_the_reason(tmp_path: Path) -> None:
    result = runner.invoke(app, ["sim", "--pools", "h100:x"])
    assert result.exit_code == 2
    assert "NAME[:COUNT][:no-reset]" in result.stderr
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text("events:\n  - {at: 1m, fault: meltdown}\n")
    result = runner.invoke(app, ["sim", "--scenario", str(scenario)])
    assert result.exit_code == 2
    assert "meltdown" in result.stderr or "fault" in result.stderr
    result = runner.invoke(app, ["sim", "--run-for", "soon"])
    assert result.exit_code == 2
    assert "not a duration" in result.stderr


def test_run_for_stops_after_the_simulated_time_with_a_summary(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "sim",
            "--nodes",
            "4",
            "--time-factor",
            "7200",
            "--run-for",
            "2h",
            "--fault-mix",
            "none",
            "--status-every",
            "0",
            "--out-dir",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.stdout
    assert "Running for 2h simulated." in result.stdout
    assert re.search(r"stopped\. t=\s*2\.\d\dh\s+nodes 4/4 Ready", result.stdout), result.stdout
