"""The comparison's training jobs: a large fleet's gang mix, its retry budget, the report."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from demo.summary import JobsSummary, jobs_summary
from simulator.fleet.config import FLEET_BACKOFF_LIMIT, FLEET_GANGS
from simulator.fleet.faults import MEAN_LEMON_FACTOR, LemonModel
from whatif.options import CompareError, compare_fleet, options_from
from whatif.report import _jobs_section, _model_section
from whatif.runner import CompareRun, PolicyResult

pytestmark = pytest.mark.unit


def test_the_comparison_runs_a_large_fleets_gang_mix_with_no_retry_budget_by_default() -> None:
    fleet, _ = compare_fleet(options_from(nodes=1000))
    assert fleet.workloads is not None
    assert fleet.workloads.gangs == FLEET_GANGS
    assert fleet.workloads.backoff_limit == FLEET_BACKOFF_LIMIT == 0
    assert fleet.workloads.jobs_in(500)[:3] == [128, 32, 32]


def test_job_nodes_gives_every_job_one_size_and_the_default_budget() -> None:
    fleet, _ = compare_fleet(options_from(nodes=40, job_nodes=4))
    assert fleet.workloads is not None
    assert fleet.workloads.gangs is None
    assert fleet.workloads.job_nodes == 4
    assert fleet.workloads.backoff_limit == 3


def test_a_model_file_may_change_the_mix_and_budget_but_not_beside_job_nodes(
    tmp_path: Path,
) -> None:
    model = tmp_path / "model.yaml"
    model.write_text(
        "workloads:\n  backoff_limit: 3\n"
        "  gangs: [{nodes: 64, share: 0.5}, {nodes: 2, share: 0.5}]\n"
    )
    fleet, _ = compare_fleet(options_from(nodes=200, model=model))
    assert fleet.workloads is not None
    assert [g.nodes for g in fleet.workloads.gangs or ()] == [64, 2]
    assert fleet.workloads.backoff_limit == 3
    with pytest.raises(CompareError, match=r"--model: workloads\.gangs: .*--job-nodes"):
        compare_fleet(options_from(nodes=200, model=model, job_nodes=4))
    model.write_text("workloads:\n  gangs: [{nodes: 4, share: 0.7}, {nodes: 2, share: 0.7}]\n")
    with pytest.raises(CompareError, match="more than 1"):
        compare_fleet(options_from(nodes=200, model=model))


def test_the_report_says_the_comparison_set_the_mix_and_the_budget(tmp_path: Path) -> None:
    page = _model_section(CompareRun(options_from(nodes=40), ui=Console(quiet=True)))
    assert "<td>workloads.backoff_limit</td><td>0</td><td>the comparison" in page
    assert "<td>workloads.gangs</td>" in page
    assert "Meta RSC-1&#x27;s GPU time by job size (Kokolis et al." in page
    page = _model_section(CompareRun(options_from(nodes=40, job_nodes=2), ui=Console(quiet=True)))
    assert "<td>workloads.job_nodes</td><td>2</td><td>--job-nodes</td>" in page
    assert "<td>workloads.backoff_limit</td><td>3</td><td>default</td>" in page


def _jobs(**counts: int | float) -> JobsSummary:
    base: dict[str, int | float] = {
        "jobs": 3,
        "handshake_jobs": 1,
        "runs_succeeded": 0,
        "runs_failed": 0,
        "runs_failed_by_remediation": 0,
        "gpu_seconds_allocated": 0.0,
        "gpu_seconds_lost_to_faults": 0.0,
        "gpu_seconds_lost_to_remediation": 0.0,
        "disruptions": 0,
        "failures_caused_by_remediation": 0,
        "handshake_failures_caused_by_remediation": 0,
    }
    summary = jobs_summary(base | counts, [])
    assert summary is not None
    return summary


def test_job_runs_are_counted_by_gang_size_and_hangs_with_their_timeouts() -> None:
    jobs = _jobs(
        runs_succeeded=197,
        runs_failed=3,
        hangs=5,
        hang_timeouts=2,
        hangs_ended_by_remediation=3,
        gpu_seconds_hung=7200.0,
        **{
            "runs_succeeded.gang.128": 7,
            "runs_failed.gang.128": 3,
            "runs_succeeded.gang.1": 190,
        },
    )
    assert jobs.runs_by_gang == {
        "1": {"succeeded": 190, "failed": 0},
        "128": {"succeeded": 7, "failed": 3},
    }
    assert (jobs.hangs, jobs.hang_timeouts, jobs.gpu_hours_hung) == (5, 2, 2.0)
    assert jobs.hangs_ended_by_remediation == 3
    graded = PolicyResult.model_construct(name="graded", summary=_summary(jobs))
    none = PolicyResult.model_construct(name="none", summary=_summary(None))
    page = _jobs_section([graded, none])
    assert "<th>128-node gangs</th><th>1-node gangs</th>" in page
    assert "<td>197 / 200 (98.50%)</td><td>7 / 10 (70.00%)</td><td>190 / 190 (100.00%)</td>" in page
    assert "<td>5: 3 / 2</td><td>2.0</td>" in page
    assert "<td>none</td>" not in page  # a policy run without jobs has no row
    assert _jobs_section([none]) == ""


def _summary(jobs: JobsSummary | None) -> object:
    from demo.summary import DemoSummary

    return DemoSummary.model_construct(jobs=jobs)


def test_lemon_share_gives_that_share_of_slots_lemon_hosts_and_zero_takes_them_away(
    tmp_path: Path,
) -> None:
    fleet, _ = compare_fleet(options_from(nodes=200, lemon_share=0.012))
    assert fleet.fault_mix is not None
    assert fleet.fault_mix.lemons == LemonModel(share=0.012, factor=MEAN_LEMON_FACTOR)
    mix = tmp_path / "mix.yaml"
    mix.write_text("rates: {xid_reset: 0.001}\nlemons: {share: 0.1, factor: 5}\n")
    fleet, _ = compare_fleet(options_from(nodes=200, fault_mix=str(mix), lemon_share=0.02))
    assert fleet.fault_mix is not None
    assert fleet.fault_mix.lemons == LemonModel(share=0.02, factor=5)  # the mix's factor
    fleet, _ = compare_fleet(options_from(nodes=200, fault_mix=str(mix), lemon_share=0))
    assert fleet.fault_mix is not None
    assert fleet.fault_mix.lemons is None
    with pytest.raises(CompareError, match=r"--lemon-share: .*from 0 to 1, got 1\.5"):
        options_from(nodes=200, lemon_share=1.5)


def test_lemon_share_is_a_sweep_axis() -> None:
    from whatif.sweep import parse_sweep

    sweep = parse_sweep("lemon-share=0,0.012,0.05", options_from(nodes=40, seed=1))
    assert [o.lemon_share for o in sweep.options] == [0.0, 0.012, 0.05]
    assert sweep.axis.label == "share of hosts that are lemons"


def test_every_figure_the_report_lists_names_its_source_or_says_it_is_an_assumption() -> None:
    import html
    import re

    page = _model_section(CompareRun(options_from(nodes=40), ui=Console(quiet=True)))
    rows = re.findall(
        r"<tr><td>([^<]*)</td><td>[^<]*</td><td>[^<]*</td><td>([^<]*)</td></tr>", page
    )
    assert len(rows) == page.count("<tr><td>") > 35
    sourced = re.compile(
        r"assumption|arXiv|NVIDIA|PyTorch|Kubernetes|kubernetes/|karpenter|amazon-eks-ami|"
        r"AWS|EC2|\.go|docs/|agent|contract|Meta|JobSet|not a figure",
        re.IGNORECASE,
    )
    unsourced = [key for key, text in rows if not sourced.search(html.unescape(text))]
    assert unsourced == []


def test_node_launch_is_refused_where_the_model_gives_the_instance_type_its_own(
    tmp_path: Path,
) -> None:
    model = tmp_path / "model.yaml"
    model.write_text(
        "capacity:\n  launch_by_instance_type: [{instance_type: p5.48xlarge, median: 15m}]\n"
    )
    with pytest.raises(CompareError, match="--node-launch: the model file gives"):
        compare_fleet(options_from(nodes=40, model=model, node_launch="20m"))
    fleet, _ = compare_fleet(options_from(nodes=40, model=model))
    assert fleet.capacity.launch_median("p5.48xlarge", fleet.durations.node_launch).seconds == 900
    model.write_text(
        "capacity:\n  launch_by_instance_type: [{instance_type: a, median: 15m}, "
        "{instance_type: a, median: 5m}]\n"
    )
    with pytest.raises(CompareError, match="each instance type once"):
        compare_fleet(options_from(nodes=40, model=model))
