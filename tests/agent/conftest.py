"""Fixtures for the node agent: fake tools first on PATH, a fake node, the agent as a process.

The fakes are small shell scripts that print what a test told them to, exit
with a chosen code, hang (sleep in a child process, so only killing the
process group stops them) or are missing altogether. The agent runs as
``python -m agent`` in a subprocess, so its exit codes are real.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from tests.agent.lines import BUSES
from tests.agent.outputs import FI_INFO_EFA, health_json, smi_output
from tests.gpu_remediation.hostile_inputs import LINEAR_GUARD_MARKER

REPO = Path(__file__).resolve().parents[2]


def pytest_configure(config: pytest.Config) -> None:
    # The parser guard (test_parsers_linear.py) is marked as one, not as a benchmark.
    config.addinivalue_line("markers", LINEAR_GUARD_MARKER)


_TOOL = """#!/bin/sh
here=$(dirname "$0")
echo "$*" >> "$here/{name}.calls"
if [ -f "$here/{name}.hang" ]; then
  sleep "$(cat "$here/{name}.hang")"
fi
cat "$here/{name}.stdout"
exit "$(cat "$here/{name}.exit")"
"""

# A journalctl that serves journal.txt with line-number cursors (s=<n>).
_JOURNALCTL = """#!/bin/sh
here=$(dirname "$0")
echo "$*" >> "$here/journalctl.calls"
after=0
for arg in "$@"; do
  case "$arg" in --after-cursor=s=*) after="${arg#--after-cursor=s=}";; esac
done
total=$(wc -l < "$here/journal.txt")
tail -n +"$((after + 1))" "$here/journal.txt"
if [ "$total" -gt "$after" ]; then echo "-- cursor: s=$total"; fi
"""


class FakeTools:
    """Fake ``dcgmi``, ``nvidia-smi``, ``fi_info`` and ``journalctl`` in one directory."""

    def __init__(self, directory: Path) -> None:
        self.bin = directory
        directory.mkdir(parents=True)
        (directory / "journal.txt").write_text("")
        journalctl = directory / "journalctl"
        journalctl.write_text(_JOURNALCTL)
        journalctl.chmod(journalctl.stat().st_mode | stat.S_IEXEC)

    def respond(self, name: str, stdout: str, exit_code: int = 0) -> None:
        """``name`` prints ``stdout`` and exits with ``exit_code``."""
        script = self.bin / name
        script.write_text(_TOOL.format(name=name))
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
        (self.bin / f"{name}.stdout").write_text(stdout)
        (self.bin / f"{name}.exit").write_text(str(exit_code))
        (self.bin / f"{name}.hang").unlink(missing_ok=True)

    def script(self, name: str, body: str) -> None:
        """``name`` is this shell script (for tools whose answer depends on the arguments)."""
        script = self.bin / name
        script.write_text(f'#!/bin/sh\necho "$*" >> "$(dirname "$0")/{name}.calls"\n{body}')
        script.chmod(script.stat().st_mode | stat.S_IEXEC)

    def hang(self, name: str, seconds: float = 30) -> None:
        """``name`` sleeps ``seconds`` (in a child process) before answering."""
        if not (self.bin / name).exists():
            self.respond(name, "")
        (self.bin / f"{name}.hang").write_text(str(seconds))

    def remove(self, name: str) -> None:
        """``name`` is not installed."""
        (self.bin / name).unlink(missing_ok=True)

    def calls(self, name: str) -> list[str]:
        """The argument lines ``name`` was called with."""
        path = self.bin / f"{name}.calls"
        return path.read_text().splitlines() if path.exists() else []

    def journal(self, text: str) -> None:
        """Append ``text`` to what the fake journalctl serves."""
        with open(self.bin / "journal.txt", "a") as handle:
            handle.write(text)

    def healthy(self) -> None:
        """Every tool answers: DCGM healthy, 8 GPUs fine, the EFA provider present."""
        self.respond("dcgmi", health_json())
        self.respond("nvidia-smi", smi_output())
        self.respond("fi_info", FI_INFO_EFA)


class Result(NamedTuple):
    """One agent run."""

    code: int
    stdout: str
    stderr: str
    seconds: float


class Node:
    """A fake GPU node: boot id, kernel log, /proc GPU listing, sysfs, state dir, tools."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.tools = FakeTools(root / "bin")
        self.tools.healthy()
        self.boot_id = root / "boot_id"
        self.boot_id.write_text(str(uuid.uuid4()) + "\n")
        self.kern_log = root / "kern.log"
        self.kern_log.write_text("")
        self.state_dir = root / "state"
        self.sysfs = root / "sys"
        self.proc_gpus = root / "proc-gpus"
        for bus in BUSES:
            (self.proc_gpus / f"{bus}.0").mkdir(parents=True)
        self.settings: dict[str, Any] = {
            "state_dir": str(self.state_dir),
            "kernel_log": f"file:{self.kern_log}",
            "boot_id_path": str(self.boot_id),
            "nvidia_proc_gpus": str(self.proc_gpus),
            "sysfs_root": str(self.sysfs),
            "instance_type": "p5.48xlarge",
            "dcgm_timeout": 1.5,
            "nvidia_smi_timeout": 1.5,
            "fi_info_timeout": 1.5,
            "journal_timeout": 3,
            "deadline": 10,
        }

    def configure(self, **settings: Any) -> None:
        """Change agent settings for the next runs."""
        self.settings.update(settings)

    def config_file(self) -> Path:
        path = self.root / "agent.json"
        path.write_text(json.dumps(self.settings))
        return path

    def reboot(self) -> None:
        """A new boot id, as after a reboot."""
        self.boot_id.write_text(str(uuid.uuid4()) + "\n")

    def log(self, text: str) -> None:
        """Append raw text to the kernel log file."""
        with open(self.kern_log, "a") as handle:
            handle.write(text)

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("REMEDIATE_AGENT_")}
        env["PATH"] = f"{self.tools.bin}{os.pathsep}/usr/bin{os.pathsep}/bin"
        return env

    def agent(self, *args: str, check: str = "gpu", timeout: float = 30) -> Result:
        """Run ``python -m agent check`` (or the given arguments) as NPD would."""
        argv = list(args) or ["check", "--check", check, "--config", str(self.config_file())]
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "agent", *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env(),
            cwd=REPO,
            check=False,
        )
        return Result(done.returncode, done.stdout.strip(), done.stderr, time.monotonic() - started)


@pytest.fixture
def node(tmp_path: Path) -> Node:
    """A healthy fake node; tests break it as they need."""
    return Node(tmp_path)
