"""`remediate watch`: bad input exits 2; the command reports selected nodes and stops on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from temporalio.client import Client
from typer.testing import CliRunner

from cli.main import app
from tests.conftest import assert_eventually
from tests.triggers.watcher_support import (
    GPU_LABELS,
    emulator,
    evidence_reports,
    new_cluster,
    terminate_incidents,
)

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner(env={"COLUMNS": "200", "NO_COLOR": "1"})


def test_an_invalid_cluster_name_exits_2() -> None:
    result = runner.invoke(app, ["watch", "--cluster", "not a cluster!"])
    assert result.exit_code == 2
    assert "invalid cluster name" in result.stderr


def test_an_invalid_trigger_policy_exits_2_naming_the_field(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("triggers:\n  conditions:\n    - {type: Ready, problem_statuses: [Maybe]}\n")
    result = runner.invoke(app, ["watch", "--policy", str(policy)])
    assert result.exit_code == 2
    assert "triggers.conditions[0].problem_statuses[0]" in result.stderr


async def test_watch_reports_the_selected_nodes_and_stops_cleanly_on_sigterm(
    dev_client: Client, task_queue: str, tmp_path: Path
) -> None:
    cluster = new_cluster()
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "triggers:\n  conditions:\n"
        '    - {type: GpuHealthProblem, problem_statuses: ["True"], grace: 0s}\n'
    )
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("TEMPORAL_", "GPU_REMEDIATION_"))
    }
    with emulator() as emu:
        # --selector replaces the policy's selector (which would pick gpu-u).
        emu.store.put_node("gpu-u", labels=GPU_LABELS)
        emu.store.put_node("gpu-s", labels={"pool": "gpu"})
        for node in ("gpu-u", "gpu-s"):
            emu.store.set_node_condition(
                node, "GpuHealthProblem", "True", reason="GpuXidError", message="Xid 79 on GPU 0"
            )
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "cli.main",
            "watch",
            "--cluster",
            cluster,
            "--policy",
            str(policy),
            "--selector",
            "pool=gpu",
            "--kube-api-url",
            emu.url,
            "--address",
            dev_client.service_client.config.target_host,
            "--namespace",
            dev_client.namespace,
            "--task-queue",
            task_queue,
            "--tick",
            "0.1",
            cwd=REPO,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            await assert_eventually(
                lambda: evidence_reports(dev_client, cluster, "gpu-s"),
                lambda r: len(r) == 1,
                timeout=30,
                interval=0.2,
            )
            # Changes arrive in order: once gpu-s's is in, gpu-u's was seen too.
            for node in ("gpu-u", "gpu-s"):
                emu.store.set_node_condition(
                    node,
                    "GpuHealthProblem",
                    "True",
                    reason="GpuXidError",
                    message="Xid 48 on GPU 1",
                )
            await assert_eventually(
                lambda: evidence_reports(dev_client, cluster, "gpu-s"), lambda r: len(r) == 2
            )
            assert await evidence_reports(dev_client, cluster, "gpu-u") == []
            process.send_signal(signal.SIGTERM)
            _, stderr = await asyncio.wait_for(process.communicate(), timeout=30)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    assert process.returncode == 0, stderr.decode()
    assert "watching nodes matching 'pool=gpu'" in stderr.decode()
    assert "watcher stopped" in stderr.decode()
    await terminate_incidents(dev_client, cluster, "gpu-s")
