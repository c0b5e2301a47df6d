"""The clock-free comparison (ADR 018): each policy on a time-skipping server the fleet follows."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from whatif.options import options_from
from whatif.report import write_report
from whatif.results import comparison_json
from whatif.runner import CompareRun

SCENARIO = Path(__file__).parents[2] / "demo" / "scenarios" / "default.yaml"


@pytest.mark.e2e
async def test_the_demos_scenario_runs_every_rung_on_the_servers_clock(tmp_path: Path) -> None:
    options = options_from(
        scenario=SCENARIO,
        policies="graded,replace-always",
        clock="server",
        settle_timeout=60,
        refresh_interval=0.5,
        live=False,
        parallel=2,
    )
    compare = CompareRun(options, ui=Console(quiet=True))
    results = await compare.run()
    data = comparison_json(results)["policies"]

    assert list(data) == ["graded", "replace-always"]
    assert len({row["timeline"]["digest"] for row in data.values()}) == 1
    for row in data.values():
        assert row["settled"]
        # Nothing is scaled: one simulated second is one second of the server's clock.
        assert row["time_factor"] == 1.0
        assert row["clock"]["steps"] > 0
    graded, replace = data["graded"], data["replace-always"]
    # The ladder's every rung, as in the demo: resets, reboots, replacements.
    assert graded["outcomes"]["repaired"] >= 3
    assert graded["outcomes"]["replaced"] >= 1
    assert graded["outcomes"]["transient"] == 1
    assert graded["outcomes"]["application_fault"] == 1
    # Two slow GPUs: one the agent's GpuDegraded shows, one only the job's step times
    # (a straggler report, diagnosed once idle; the diagnostic names the fault).
    assert graded["by_fault_class"]["gpu_degraded"] == {"repaired": 2}
    assert graded["started_by"]["straggler"] == 1
    assert 0 < graded["availability"] <= graded["availability_working"] <= 1
    assert {"gpu_reset", "reboot", "replace"} <= set(graded["rung_attempts"])
    # The checkpoint handshake: each request answered through the relay, which the
    # driver waits for before the server's time moves on.
    assert graded["jobs"]["checkpoint_requests"] > 0
    assert graded["jobs"]["checkpoints_answered"] == graded["jobs"]["checkpoint_requests"]
    assert set(replace["rung_attempts"]) <= {"stop_gpu_work", "replace"}
    assert replace["replacements"] > 0
    write_report(tmp_path / "report.html", compare, results)
    page = (tmp_path / "report.html").read_text()
    assert "clock-free (ADR 018)" in page
    assert "time-skipping test server" in page


@pytest.mark.unit
def test_chaos_is_refused_on_the_servers_clock() -> None:
    from whatif.options import CompareError

    with pytest.raises(CompareError, match="--chaos runs on the paced clock only"):
        options_from(clock="server", chaos=True)


@pytest.mark.unit
def test_a_step_phase_is_refused_on_the_paced_clock() -> None:
    from whatif.options import CompareError

    with pytest.raises(CompareError, match="step_phase: only with the clock-free comparison"):
        options_from(clock="paced", step_phase=0.5)
    assert options_from(clock="server", step_phase=0.5).step_phase == 0.5
