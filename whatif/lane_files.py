"""One policy's run kept as a file, and one comparison put together from such files.

Each policy of a comparison already runs on its own: its own fleet, worker and
Temporal server, the same planned faults (ADR 015, ADR 018). So the lanes of one
comparison may run at different times or on different machines, as long as the
same code ran them with the same options: a month at ten times the fault rate
takes longer than one session of a 2-core machine, and one lane of it does not.
:func:`write_lanes` keeps each policy's whole result (its samples too, which the
report's charts draw); :func:`merge_lanes` reads them back and refuses files that
do not belong to one comparison: other code (another commit, or other changes
to it), other options, another fault timeline, a policy twice.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from policies import BUILT_IN
from whatif.options import CompareOptions
from whatif.runner import PolicyResult

LANE_FORMAT = "gpu-remediation.compare-lane/1"

RUN_ONLY_OPTIONS = frozenset({"policies", "parallel", "report", "json_output", "live"})
"""Options that change how a comparison runs or shows, not what it computes."""


class LaneMergeError(ValueError):
    """Lane files that do not make one comparison (the message names the file and why)."""


class LaneFile(BaseModel):
    """One policy's run: what ran it, with which options, its result and what it cost."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Literal["gpu-remediation.compare-lane/1"]
    commit: str
    """The code's git commit, and its changes' hash if it had any (:func:`code_commit`)."""
    options: CompareOptions
    result: PolicyResult
    measured: dict[str, Any]
    """What the run it came from cost (wall, CPU by role, peak memory), as measured."""


def code_commit(root: Path | None = None) -> str:
    """The git commit of the code in ``root`` (this checkout) and of its changes, if any.

    A checkout with changes to tracked files is ``<commit>-dirty-<hash of the diff>``:
    two runs of the same changes merge, two of different ones do not. (Untracked files
    are not looked at.)

    Raises:
        LaneMergeError: Not a git checkout: a lane file must say what ran it.
    """
    where = str(root or Path(__file__).resolve().parent.parent)
    try:
        head = _git(where, "rev-parse", "HEAD").strip()
        diff = _git(where, "diff", "--no-ext-diff", "HEAD")
    except (OSError, subprocess.CalledProcessError) as err:
        raise LaneMergeError(
            f"{where} is not a git checkout: lane files need a commit ({err})"
        ) from err
    if not diff:
        return head
    return f"{head}-dirty-{hashlib.sha256(diff.encode()).hexdigest()[:12]}"


def _git(where: str, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", where, *args], check=True, capture_output=True, text=True
    ).stdout


def write_lanes(
    directory: Path,
    options: CompareOptions,
    results: Sequence[PolicyResult],
    measured: dict[str, Any],
    commit: str,
) -> list[Path]:
    """Write one lane file per policy into ``directory`` (``<policy>.json``); their paths."""
    paths = []
    for result in results:
        lane = LaneFile(
            format=LANE_FORMAT, commit=commit, options=options, result=result, measured=measured
        )
        path = directory / f"{result.name}.json"
        path.write_text(lane.model_dump_json(indent=1) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


def merge_lanes(paths: Sequence[Path]) -> tuple[CompareOptions, list[LaneFile]]:
    """Read lane files of one comparison; its options (every policy, in the files' order).

    Raises:
        LaneMergeError: A file unreadable or not a lane file, or the files not one
            comparison's lanes (see the module).
    """
    if len(paths) < 2:
        raise LaneMergeError(f"a merge takes two lane files or more, not {len(paths)}")
    lanes: list[LaneFile] = []
    for path in paths:
        try:
            lanes.append(LaneFile.model_validate_json(path.read_bytes()))
        except OSError as err:
            raise LaneMergeError(f"{path}: {err}") from err
        except ValidationError as err:
            raise LaneMergeError(f"{path}: not a lane file ({LANE_FORMAT}): {err}") from err
    first, first_path = lanes[0], paths[0]
    computes = first.options.model_dump(exclude=set(RUN_ONLY_OPTIONS))
    seen: dict[str, Path] = {}
    for lane, path in zip(lanes, paths, strict=True):
        if lane.commit != first.commit:
            raise LaneMergeError(
                f"{path}: ran commit {lane.commit}, {first_path} ran {first.commit}"
            )
        other = lane.options.model_dump(exclude=set(RUN_ONLY_OPTIONS))
        differ = sorted(k for k in computes if computes[k] != other[k])
        if differ:
            raise LaneMergeError(
                f"{path}: other options than {first_path}: "
                + ", ".join(f"{k} {other[k]!r} (not {computes[k]!r})" for k in differ)
            )
        if lane.result.timeline.digest != first.result.timeline.digest:
            raise LaneMergeError(f"{path}: another fault timeline than {first_path}'s")
        if lane.result.name in seen:
            raise LaneMergeError(
                f"{path}: policy {lane.result.name} is already in {seen[lane.result.name]}"
            )
        seen[lane.result.name] = path
    # A baseline by its name (its source is the repository's file), a policy file by its path.
    policies = [
        lane.result.name if lane.result.name in BUILT_IN else lane.result.source for lane in lanes
    ]
    options = first.options.model_copy(update={"policies": ",".join(policies)})
    return options, lanes
