"""Bounded tool runs: timeouts kill the whole process group; missing and failing tools are named."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

from agent.runner import KILL_GRACE, Background, run


def script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "tool"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def gone(pid: int, within: float = 2.0) -> bool:
    """Whether ``pid`` exited (a zombie nobody reaped counts) within ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state == "Z":
            return True
        time.sleep(0.01)
    return False


def test_a_tool_that_hangs_is_killed_with_its_children_at_the_timeout(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    tool = script(tmp_path, f"sleep 30 &\necho $! > {pid_file}\nwait\n")
    started = time.monotonic()
    result = run([tool], 0.5)
    assert result.status == "hung"
    assert time.monotonic() - started < 0.5 + KILL_GRACE
    # The grandchild holding the pipe was killed with the process group.
    assert gone(int(pid_file.read_text()))
    assert result.describe() == "tool hung: no answer within 0.5 s, killed"


def test_missing_tool_is_reported_as_missing(tmp_path: Path) -> None:
    result = run([str(tmp_path / "dcgmi"), "health"], 1)
    assert (result.status, result.describe()) == (
        "missing",
        f"dcgmi not found ({tmp_path / 'dcgmi'})",
    )


def test_non_executable_tool_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "tool"
    path.write_text("not a program")
    assert run([str(path)], 1).status == "error"


def test_exit_code_and_output_are_kept(tmp_path: Path) -> None:
    tool = script(tmp_path, "echo out; echo 'Error: no host engine' >&2; exit 3\n")
    result = run([tool, "a b"], 5)
    assert (result.status, result.exit_code, result.stdout) == ("failed", 3, b"out\n")
    assert result.describe() == "tool failed with exit code 3: Error: no host engine"


def test_arguments_are_passed_as_a_list_not_through_a_shell(tmp_path: Path) -> None:
    tool = script(tmp_path, 'printf "%s|" "$@"\n')
    assert run([tool, "$(id)", "a;b"], 5).stdout == b"$(id)|a;b|"


def test_background_runs_overlap(tmp_path: Path) -> None:
    tool = script(tmp_path, "sleep 1\n")
    started = time.monotonic()
    runs = [Background([tool], 5) for _ in range(3)]
    assert [r.result().status for r in runs] == ["ok"] * 3
    assert time.monotonic() - started < 2.5  # one after the other would take 3 s
    assert os.path.exists(tool)
