"""A small comparison end to end: two baselines, the same faults, through the real system."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from temporalio.testing import WorkflowEnvironment

from demo.summary import DemoSummary
from whatif.options import options_from
from whatif.results import comparison_json
from whatif.runner import CompareRun


async def test_two_baselines_see_the_same_faults_and_act_as_their_names_say(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    mix = tmp_path / "mix.yaml"
    # Hardware faults only a replacement fixes, and resettable ones: about 3 in the hour.
    mix.write_text("rates: {gpu_hardware: 0.2, xid_reset: 0.2}\nmultiplier: 1\n")
    options = options_from(
        nodes=10,
        pools="h100",
        fault_mix=str(mix),
        duration="1h",
        seed=3,
        time_factor=600,
        policies="no-automation,replace-always",
        workloads=False,
        settle_timeout=20,
        refresh_interval=0.5,
        report=tmp_path / "report.html",
        live=False,
        parallel=2,
    )
    compare = CompareRun(options, ui=Console(quiet=True))
    progress: list[str] = []
    compare.on_progress = lambda p: progress.append(p.policy)
    results = await compare.run(dev_env.client)
    data = comparison_json(results)["policies"]

    # Side by side, each in a child process; the results in --policies order.
    assert compare.lanes == 2
    assert set(progress) == {"no-automation", "replace-always"}
    assert list(data) == ["no-automation", "replace-always"]
    digests = {row["timeline"]["digest"] for row in data.values()}
    assert len(digests) == 1
    assert data["no-automation"]["timeline"]["planned"] > 0
    for row in data.values():
        assert set(DemoSummary.model_fields) <= set(row)
        assert {"start", "window", "settle", "stop"} <= set(row["timing"])
        assert 0 < row["timing"]["window"] < 60
        assert "relay_start" not in row["timing"]  # jobs.enabled false: no relay at all
        assert row["rung_attempts"].get("gpu_reset", 0) == 0
        assert row["reboots"] == 0
        # The real latency the system added, read from each resolved incident's history.
        latency = row["latency"]
        assert latency["incidents_resolved"] == row["mttr_incidents"]
        assert latency["incidents_measured"] == row["mttr_incidents"]
        assert latency["mttr_clock_p50_s"] == row["mttr_clock_p50_s"]
        if row["mttr_incidents"]:
            assert 0 < latency["real_p50_s"] < row["mttr_real_p50_s"]
            assert latency["by_kind_mean_real_s"]["workflow_task"] > 0
            assert latency["added_sim_p50_s"] > 0
            assert latency["share_of_mttr_p50"] > 0
        assert "latency" in row["timing"]
        # The capacity model at its defaults: every launch finds an instance at once.
        capacity = row["capacity"]
        assert (capacity["insufficient_capacity"], capacity["node_hours_short"]) == (0, 0.0)
        assert capacity["overlap_instance_hours"] >= 0.0

    manual, karpenter = data["no-automation"], data["replace-always"]
    # No automation: the remediation only hands nodes over; only the person acts.
    assert manual["escalations"] > 0
    assert manual["rung_attempts"] == {}
    assert manual["replacements"] == 0
    assert manual["operator"]["tickets"] == manual["escalations"]
    # Karpenter node repair: every hardware incident ends in a replacement.
    assert karpenter["replacements"] > 0
    assert set(karpenter["rung_attempts"]) <= {"replace"}

    from whatif.report import write_report

    write_report(tmp_path / "again.html", compare, results)
    page = (tmp_path / "again.html").read_text()
    assert "<script" not in page  # charts are inline SVG: nothing to load, it opens offline
    assert "src=" not in page
    assert 'href="http' not in page  # only in-page references (#clip ids)
    assert page.count("<svg") == 4  # healthy nodes, replacements, GPU-hours lost, job runs
    assert len(page) < 400_000  # small enough to commit
    assert "time factor 600" in page
    assert "Capacity and what replacements cost" in page
    assert "What the system&#x27;s own latency added" in page or "own latency added" in page
