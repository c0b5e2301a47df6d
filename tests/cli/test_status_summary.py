"""`remediate status` and the Temporal UI sum an incident up in the same words."""

from __future__ import annotations

from gpu_remediation.jobs import describe_jobs
from gpu_remediation.search_attributes import SA_CLUSTER, SA_NODE
from tests.cli.conftest import Cli, parsed
from tests.conftest import assert_eventually
from tests.workflows.job_support import job, on_node


async def test_status_prints_the_summary_the_ui_shows(cli: Cli) -> None:
    parsed(await cli.run("gpu-8", "replace", "--policy", str(cli.policy_file), "--json"))
    shown = await assert_eventually(
        lambda: cli.status_json("gpu-8"),
        lambda shown: shown["state"]["waiting_for"] == "approval of replace",
        message="gpu-8 waits for approval of its replacement",
    )
    summary = shown["summary"]
    assert summary.startswith("gpu-8 (pool gpu-pool): hardware_failure, at ")
    # The static summary the starter set, as the UI's incident page shows it.
    assert shown["opened_as"] == "gpu-8: hardware_failure, ladder from replace"

    handle = cli.env.client.get_workflow_handle(shown["workflow_id"])
    metadata = await handle.query("__temporal_workflow_metadata")
    assert metadata.current_details.startswith(f"### {summary}\n")
    description = await handle.describe()
    assert await description.static_summary() == shown["opened_as"]
    assert "runbook replace by" in (await description.static_details() or "")
    attributes = description.typed_search_attributes
    assert attributes.get(SA_NODE) == "gpu-8"
    assert attributes.get(SA_CLUSTER) == cli.cluster.name

    (row,) = parsed(await cli.node_command("status", "--json"))["incidents"]
    assert row["summary"] == summary
    detail = await cli.node_command("status", "gpu-8")
    assert detail.exit_code == 0, detail.stderr
    lines = detail.stdout.splitlines()
    assert lines[0].startswith(summary)
    assert lines[1] == f"opened as: {shown['opened_as']}"


async def test_status_and_the_ui_name_the_job_on_the_node_and_its_checkpoint(cli: Cli) -> None:
    llm = job("llm", nodes=4)
    cli.cluster.fleet.node_jobs = [on_node(llm)]
    parsed(await cli.run("gpu-9", "reset", "--json"))
    shown = await assert_eventually(
        lambda: cli.status_json("gpu-9"),
        lambda shown: (shown["state"]["waiting_for"] or "").startswith("a job checkpoint"),
        message="gpu-9 waits for its job's checkpoint",
    )
    assert shown["state"]["checkpoint"] == "asked"
    line = describe_jobs([llm])
    assert "ml/llm" in line
    detail = await cli.node_command("status", "gpu-9")
    assert detail.exit_code == 0, detail.stderr
    assert f"jobs {line}  checkpoint asked" in detail.stdout.splitlines()

    handle = cli.env.client.get_workflow_handle(shown["workflow_id"])
    metadata = await handle.query("__temporal_workflow_metadata")
    assert f"jobs: {line} · checkpoint: **asked**" in metadata.current_details
