"""``python -m bench.compare --lanes-out`` then ``--merge``: one comparison from separate lanes.

One small clock-free run of two policies keeps its lanes; merged, they give the
same rows and a report. Lanes that are not one comparison's are refused, naming
the file and why.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from whatif.lane_files import LaneMergeError, merge_lanes


def _compare(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench.compare", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.fixture(scope="module")
def lanes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """Two policies' lane files of one small clock-free run, and that run's JSON."""
    where = tmp_path_factory.mktemp("lanes")
    done = _compare(
        "--clock", "server", "--nodes", "20", "--days", "0.1", "--multiplier", "10",
        "--policies", "graded,replace-always", "--parallel", "1",
        "--lanes-out", where, "--out", where / "run.json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return where, json.loads((where / "run.json").read_text())


@pytest.mark.e2e
def test_merged_lanes_give_the_runs_rows_and_a_report(
    lanes: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    where, run = lanes
    done = _compare(
        "--merge", where / "replace-always.json", where / "graded.json",
        "--out", tmp_path / "merged.json", "--report", tmp_path / "merged.html",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    merged = json.loads((tmp_path / "merged.json").read_text())
    rows = merged["comparison"]["policies"]
    assert list(rows) == ["replace-always", "graded"]  # in the files' order
    assert rows == {name: run["comparison"]["policies"][name] for name in rows}
    assert merged["digest"] == run["digest"]
    assert [m["policy"] for m in merged["merged_from"]] == ["replace-always", "graded"]
    assert all(m["wall_s"] == run["wall_s"] for m in merged["merged_from"])
    assert "<svg" in (tmp_path / "merged.html").read_text()


def _edited(where: Path, name: str, out: Path, **changes: Any) -> Path:
    lane = json.loads((where / f"{name}.json").read_text())
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        target = lane
        for parent in parents:
            target = target[parent]
        target[leaf] = value
    out.write_text(json.dumps(lane))
    return out


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        ({"commit": "0" * 40}, "ran commit 0000"),
        ({"options__seed": 7}, "other options than .*: seed 7 \\(not 0\\)"),
        ({"result__timeline__digest": "feedfeed"}, "another fault timeline"),
        ({"format": "something/else"}, "not a lane file"),
    ],
    ids=["commit", "options", "timeline", "format"],
)
def test_lanes_of_another_comparison_are_refused_naming_the_file(
    lanes: tuple[Path, dict[str, Any]], tmp_path: Path, change: dict[str, Any], refusal: str
) -> None:
    where, _ = lanes
    other = _edited(where, "graded", tmp_path / "other.json", **change)
    with pytest.raises(LaneMergeError, match=refusal) as caught:
        merge_lanes([where / "replace-always.json", other])
    assert "other.json" in str(caught.value)


@pytest.mark.e2e
def test_a_policy_twice_or_a_single_lane_is_refused(
    lanes: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    where, _ = lanes
    copy = _edited(where, "graded", tmp_path / "again.json")
    with pytest.raises(LaneMergeError, match="policy graded is already in"):
        merge_lanes([where / "graded.json", copy])
    with pytest.raises(LaneMergeError, match="two lane files or more, not 1"):
        merge_lanes([where / "graded.json"])
    done = _compare("--merge", where / "graded.json", tmp_path / "missing.json")
    assert done.returncode == 2
    assert "merge refused:" in done.stderr
    assert "missing.json" in done.stderr


@pytest.mark.e2e
def test_run_only_options_may_differ_between_lanes(
    lanes: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    # How a lane ran (side by side or alone, with a report or not) changes no result.
    where, _ = lanes
    other = _edited(where, "graded", tmp_path / "alone.json", options__parallel=2)
    options, merged = merge_lanes([where / "replace-always.json", other])
    assert options.policies == "replace-always,graded"
    assert [lane.result.name for lane in merged] == ["replace-always", "graded"]
