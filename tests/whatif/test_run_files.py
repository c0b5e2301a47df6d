"""A comparison's run directory (logs, server database) is kept only when something failed."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from demo.chaos.session import ChaosReport
from whatif.options import options_from
from whatif.runner import CompareRun, PolicyResult


def finished(tmp_path: Path, *violations: str) -> tuple[CompareRun, Path]:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "compare.log").write_text("...")
    compare = CompareRun(options_from(nodes=4, chaos=True), ui=Console(quiet=True), run_dir=run_dir)
    chaos = ChaosReport(faults_injected={}, faults=[], invariants={}, violations=list(violations))
    compare.results = [PolicyResult.model_construct(name="graded", chaos=chaos)]
    return compare, run_dir


def test_the_files_are_removed_when_every_invariant_held(tmp_path: Path) -> None:
    compare, run_dir = finished(tmp_path)
    compare._clean_up()
    assert not run_dir.exists()


def test_the_files_are_kept_when_a_chaos_invariant_broke(tmp_path: Path) -> None:
    compare, run_dir = finished(tmp_path, "incidents_lost: h100-0001 has no incident")
    compare._clean_up()
    assert (run_dir / "compare.log").exists()
