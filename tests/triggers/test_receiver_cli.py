"""`remediate receiver`: refuses to run without a token; serves alerts when it has one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment
from typer.testing import CliRunner

from cli.main import app
from cli.receiver import TOKEN_ENV
from demo.server import free_port
from tests.conftest import assert_eventually
from tests.triggers.receiver_support import AUTH, TOKEN, alert, describe, payload

runner = CliRunner(env={"COLUMNS": "200", "NO_COLOR": "1", TOKEN_ENV: ""})


def test_without_a_token_the_receiver_refuses_to_start() -> None:
    result = runner.invoke(app, ["receiver"])
    assert result.exit_code == 2
    assert f"no token: set {TOKEN_ENV} or pass --token-file" in result.stderr


def test_a_short_token_is_refused(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("short\n")
    result = runner.invoke(app, ["receiver", "--token-file", str(tmp_path / "token")])
    assert result.exit_code == 2
    assert "at least 16 characters" in result.stderr


def test_a_token_given_twice_is_refused(tmp_path: Path) -> None:
    (tmp_path / "token").write_text(TOKEN)
    result = runner.invoke(
        app, ["receiver", "--token-file", str(tmp_path / "token")], env={TOKEN_ENV: TOKEN}
    )
    assert result.exit_code == 2
    assert "given twice" in result.stderr


def test_a_missing_token_file_is_named(tmp_path: Path) -> None:
    result = runner.invoke(app, ["receiver", "--token-file", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert "cannot read the token file" in result.stderr


def test_an_invalid_cluster_name_is_refused_before_connecting() -> None:
    result = runner.invoke(app, ["receiver", "--cluster", "bad cluster"], env={TOKEN_ENV: TOKEN})
    assert result.exit_code == 2
    assert "invalid cluster name" in result.stderr


def test_an_unreachable_temporal_stops_the_receiver_with_exit_3() -> None:
    result = runner.invoke(
        app, ["receiver", "--address", f"127.0.0.1:{free_port()}"], env={TOKEN_ENV: TOKEN}
    )
    assert result.exit_code == 3
    assert "cannot reach Temporal" in result.stderr


@pytest.fixture
def served(dev_env: WorkflowEnvironment, tmp_path: Path) -> tuple[str, subprocess.Popen[bytes]]:
    port = free_port()
    (tmp_path / "token").write_text(TOKEN + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
    env.pop(TOKEN_ENV, None)
    args = [
        sys.executable,
        "-m",
        "cli.main",
        "receiver",
        "--port",
        str(port),
        "--address",
        dev_env.client.service_client.config.target_host,
        "--cluster",
        "cli-test",
        "--task-queue",
        "tq-cli-receiver",
        "--token-file",
        str(tmp_path / "token"),
        "--log-level",
        "warning",
    ]
    process = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return f"http://127.0.0.1:{port}", process


async def test_the_command_serves_alerts_and_stops_on_sigterm(
    dev_env: WorkflowEnvironment, served: tuple[str, subprocess.Popen[bytes]]
) -> None:
    url, process = served
    try:
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:

            async def ready() -> int:
                if process.poll() is not None:
                    out = process.stdout.read().decode() if process.stdout else ""
                    raise AssertionError(f"receiver exited {process.returncode}: {out}")
                try:
                    return (await http.get("/readyz")).status_code
                except httpx.TransportError:
                    return 0

            await assert_eventually(ready, lambda status: status == 200, timeout=30, interval=0.1)
            response = await http.post("/v1/alerts", json=payload(alert("gpu-cli")), headers=AUTH)
            assert response.status_code == 200, response.text
            workflow_id = response.json()["results"][0]["workflow_id"]
            assert workflow_id == "gpu-remediation/cli-test/gpu-cli"
            description = await describe(dev_env.client, workflow_id)
            assert description is not None
            assert description.task_queue == "tq-cli-receiver"
        process.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal it caught.
        assert process.wait(timeout=15) == -signal.SIGTERM
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        await dev_env.client.get_workflow_handle("gpu-remediation/cli-test/gpu-cli").terminate()
