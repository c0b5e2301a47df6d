"""Stopping the demo's child processes (worker, receiver), each the leader of its own group."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from pathlib import Path


def kill_group(process: subprocess.Popen[bytes] | None, reap_s: float) -> None:
    """SIGKILL the process's group (a crash: nothing finishes) and reap it."""
    if process is None or process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=reap_s)


async def stop_group(
    process: subprocess.Popen[bytes] | None, grace_s: float, reap_s: float
) -> int | None:
    """SIGTERM the process's group, SIGKILL after ``grace_s``; its exit code (None: none ran)."""
    if process is None:
        return None
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            await asyncio.to_thread(process.wait, grace_s)
        except subprocess.TimeoutExpired:
            kill_group(process, reap_s)
    return process.returncode


def log_tail(path: Path, chars: int) -> str:
    """The last ``chars`` characters of a log file ("" when it cannot be read)."""
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""
