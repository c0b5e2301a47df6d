"""`remediate admit NODE [--skip-burn-in]`: the admission's state and the audited override."""

from __future__ import annotations

import asyncio

from temporalio.testing import WorkflowEnvironment

from gpu_remediation.ids import STARTUP_TAINT_KEY
from simulator.kube_api import KubeApiServer, KubeStore
from tests.cli.conftest import invoke, parsed
from tests.conftest import assert_eventually
from tests.workflows.admission_support import (
    ScriptedDiag,
    admission_worker,
    put_gated_node,
    start,
    taint_keys,
)


async def test_admit_skip_burn_in_untaints_the_node_and_logs_who_and_why(
    dev_env: WorkflowEnvironment, kube: KubeApiServer, store: KubeStore, task_queue: str
) -> None:
    put_gated_node(store, "gpu-cli")
    diag = ScriptedDiag(hold=True)
    client = dev_env.client
    where = ["--address", client.service_client.config.target_host, "--namespace", "default"]
    async with admission_worker(client, kube, task_queue, diag):
        cluster, handle = await start(client, task_queue, "gpu-cli")
        await asyncio.wait_for(diag.running.wait(), 10)
        shown = await assert_eventually(
            lambda: invoke("admit", "gpu-cli", "--cluster", cluster, *where, "--json"),
            lambda result: result.exit_code == 0,  # visibility has caught up
            message="the admission is listed",
        )
        assert parsed(shown)["state"]["stage"] == "burn-in: dcgm_diag"
        skipped = parsed(
            await invoke(
                "admit",
                "gpu-cli",
                "--skip-burn-in",
                "--by",
                "dana",
                "--reason",
                "vendor-certified host",
                "--cluster",
                cluster,
                *where,
                "--json",
            )
        )
        result = await handle.result()
    assert skipped["skipped"] is True
    assert result.outcome == "overridden"
    assert STARTUP_TAINT_KEY not in taint_keys(store, "gpu-cli")
    assert ("operator", "burn-in skipped by dana", "vendor-certified host") in [
        (d.stage, d.action, d.reason) for d in result.decisions
    ]


async def test_admit_of_a_node_without_a_running_admission_exits_4(
    dev_env: WorkflowEnvironment,
) -> None:
    client = dev_env.client
    result = await invoke(
        "admit",
        "gpu-none",
        "--cluster",
        "c-none",
        "--address",
        client.service_client.config.target_host,
        "--skip-burn-in",
    )
    assert result.exit_code == 4
    assert "gpu-none has no running admission" in result.stderr
