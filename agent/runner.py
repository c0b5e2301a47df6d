"""Bounded tool runs: argument lists only, a timeout per run, the process group killed on timeout.

DCGM and the driver tend to hang rather than fail, so every tool runs with
its own deadline. On timeout the whole process group is killed (a wrapper
script's children too); a tool stuck in uninterruptible sleep inside a wedged
driver does not even die from SIGKILL, so after a short grace the run is
abandoned instead of waited for: the cycle still answers in time.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import Literal, NamedTuple

KILL_GRACE = 1.0
"""Seconds to wait for a killed tool to exit before abandoning it."""

MAX_PARSED_OUTPUT = 1 << 20
"""Bytes of a tool's output that a check reads (1 MiB).

``nvidia-smi -q`` prints about 9 KB per GPU and ``dcgmi health -c -j`` less, so
a node's real output is a small part of this. Beyond it the output is not what
the tool says about the node's GPUs, and reading it would only cost time in a
cycle NPD's timeout bounds. The parsers are linear (issue 35,
tests/agent/test_parsers_linear.py); 1 MiB of their costliest input, DCGM health
JSON of thousands of one-word failing systems, reads in under a second (0.7 s).
"""

Status = Literal["ok", "failed", "hung", "missing", "error"]


class ToolResult(NamedTuple):
    """What one run of a tool produced.

    ``ok``: exit code 0. ``failed``: another exit code (output may still be
    useful). ``hung``: no exit within the timeout, killed. ``missing``: the
    executable does not exist. ``error``: it could not be started.
    """

    argv: tuple[str, ...]
    status: Status
    exit_code: int | None
    stdout: bytes
    stderr: bytes
    seconds: float
    timeout: float
    abandoned: bool = False

    @property
    def name(self) -> str:
        """The tool's name (basename of the executable)."""
        return os.path.basename(self.argv[0])

    def describe(self) -> str:
        """One line for a message: what went wrong, if anything."""
        if self.status == "ok":
            return f"{self.name} answered in {self.seconds:.1f} s"
        if self.status == "hung":
            stuck = ", could not be killed (stuck in the driver?)" if self.abandoned else ", killed"
            return f"{self.name} hung: no answer within {self.timeout:g} s{stuck}"
        if self.status == "missing":
            return f"{self.name} not found ({self.argv[0]})"
        if self.status == "error":
            return f"{self.name} could not be started: {self.stderr.decode(errors='replace')}"
        detail = (self.stderr or self.stdout).decode(errors="replace").strip().splitlines()
        last = detail[-1][:160] if detail else "no output"
        return f"{self.name} failed with exit code {self.exit_code}: {last}"


def head(data: bytes, limit: int = MAX_PARSED_OUTPUT) -> bytes:
    """The first ``limit`` bytes of ``data``, cut after the last whole line when there is one."""
    if len(data) <= limit:
        return data
    cut = data.rfind(b"\n", 0, limit)
    return data[: cut + 1] if cut >= 0 else data[:limit]


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    # start_new_session made the tool a group leader: its pid is the group id.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def run(argv: Sequence[str], timeout: float) -> ToolResult:
    """Run ``argv`` (no shell) for at most ``timeout`` seconds and capture its output.

    Args:
        argv: The executable and its arguments.
        timeout: Seconds before the tool counts as hung and its process group is killed.
    """
    args = tuple(argv)
    started = time.monotonic()

    def result(status: Status, code: int | None, out: bytes, err: bytes, **kw: bool) -> ToolResult:
        return ToolResult(args, status, code, out, err, time.monotonic() - started, timeout, **kw)

    try:
        process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
        )
    except FileNotFoundError:
        return result("missing", None, b"", b"")
    except OSError as err:
        return result("error", None, b"", str(err).encode())
    try:
        out, errout = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        try:
            out, errout = process.communicate(timeout=KILL_GRACE)
        except subprocess.TimeoutExpired:
            for pipe in (process.stdout, process.stderr):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
            return result("hung", None, b"", b"", abandoned=True)
        return result("hung", None, out, errout)
    code = process.returncode
    return result("ok" if code == 0 else "failed", code, out, errout)


class Background:
    """A tool run on a thread, so several tools (and the kernel-log scan) overlap."""

    def __init__(self, argv: Sequence[str], timeout: float) -> None:
        """Start running ``argv`` with ``timeout``."""
        self._argv = tuple(argv)
        self._result: ToolResult | None = None
        self._thread = threading.Thread(target=self._run, args=(timeout,), daemon=True)
        self._thread.start()

    def _run(self, timeout: float) -> None:
        self._result = run(self._argv, timeout)

    def result(self) -> ToolResult:
        """Wait for the run (bounded by its timeout plus the kill grace) and return it."""
        self._thread.join()
        if self._result is None:  # the thread died: report it, never pretend success
            return ToolResult(self._argv, "error", None, b"", b"runner thread failed", 0.0, 0.0)
        return self._result
