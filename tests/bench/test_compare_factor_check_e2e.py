"""``python -m bench.compare --factor-check``: refused before it runs, or after a run too small.

A passing check needs at least 100 incidents per policy at two factors, minutes of
real time: not a test. What is tested end to end is that the command refuses what
it cannot judge, with exit code 2 and the reason, and judges files already written.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def bench(*args: str, timeout: float = 100) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench.compare", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_factors_not_four_times_apart_are_refused_before_anything_runs() -> None:
    done = bench("--time-factor", "2400", "--factor-check", "1200", timeout=30)
    assert done.returncode == 2
    assert "factor check refused: factors 2400 and 1200 are 2x apart" in done.stderr
    assert done.stdout == ""


def test_one_factor_only_is_refused_before_anything_runs() -> None:
    done = bench("--time-factor", "2400", "--factor-check", "2400", timeout=30)
    assert done.returncode == 2
    assert "factor check refused: one factor only" in done.stderr


def test_a_noise_run_needs_the_factor_check() -> None:
    for flags in (("--noise-run",), ("--noise-runs", "3")):
        done = bench(*flags, timeout=30)
        assert done.returncode == 2
        assert "--noise-run(s): only with --factor-check" in done.stderr


def test_bad_noise_runs_and_step_phases_are_refused_before_anything_runs() -> None:
    done = bench("--factor-check", "--noise-runs", "9", timeout=30)
    assert done.returncode == 2
    assert "--noise-runs: 0 to 8, not 9" in done.stderr
    done = bench("--clock", "server", "--step-phase", "1", timeout=30)
    assert done.returncode == 2
    assert "--step-phase: a fraction of a step, 0 to below 1, not 1" in done.stderr
    done = bench("--clock", "server", "--step-phase", "0.5", "--factor-check", timeout=30)
    assert done.returncode == 2
    assert "--step-phase: not with --factor-check" in done.stderr


def test_a_run_with_too_few_incidents_is_refused_saying_how_many(tmp_path: Path) -> None:
    out = tmp_path / "check.json"
    done = bench(
        "--nodes", "4", "--days", "0.05", "--time-factor", "2400", "--factor-check",
        "--policies", "replace-always", "--parallel", "1", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert (
        "factor check refused: too few incidents to judge in the run at factor 2400: "
        "replace-always 0 (at least 100 per policy" in done.stderr
    )
    result = json.loads(out.read_text())
    # The faster, higher factor ran first; the slower one was not started.
    assert list(result["runs"]) == ["f2400"]
    assert result["factor_check"] is None
    run = json.loads((tmp_path / "check-f2400.json").read_text())
    assert (run["seed"], run["fleet"]["nodes"], run["time_factor"]) == (0, 4, 2400)
    assert run["comparison"]["policies"]["replace-always"]["latency"]["incidents_resolved"] == 0

    # The run written is a result the judge reads, and it refuses it for what it is.
    done = bench("--judge", str(tmp_path / "check-f2400.json"), str(tmp_path / "check-f2400.json"))
    assert done.returncode == 2
    assert "factor check refused: one factor only" in done.stderr
    done = bench("--judge", str(out), str(tmp_path / "check-f2400.json"))
    assert done.returncode == 2
    assert "is not a bench.compare run result: no 'time_factor'" in done.stderr
