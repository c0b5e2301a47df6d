"""The state file of one check: read under a lock, written atomically.

The state is what makes the agent incremental across runs: the kernel-log
position (offset, inode, boot id, or kmsg sequence number / journal cursor),
Xids still being reported, how many cycles in a row each tool hung, and the
PCI bus -> GPU index map from the last good ``nvidia-smi``; for ``gpu-degraded``,
the times of each signal's consecutive degraded readings (bounded by its cycle
count). A crash between cycles loses at most the cycle in flight: the file is
replaced by rename.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

STATE_VERSION = 1


class StateLockedError(RuntimeError):
    """Another run of the same check holds the state."""


class StateStore:
    """One check's state file (``<state_dir>/<check>.json``) and its lock file."""

    def __init__(self, path: Path) -> None:
        """Bind to ``path``; its directory is created on first write."""
        self.path = path
        self.corrupt_note: str | None = None

    @contextlib.contextmanager
    def locked(self, timeout: float) -> Iterator[None]:
        """Hold the check's lock (flock) for the block; wait at most ``timeout`` seconds.

        Raises:
            StateLockedError: Another run kept the lock past the timeout.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as err:
                    if err.errno not in (errno.EAGAIN, errno.EACCES):
                        raise
                    if time.monotonic() > deadline:
                        raise StateLockedError(
                            f"another run holds {self.path.name} (waited {timeout:g} s)"
                        ) from err
                    time.sleep(0.05)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def load(self) -> dict[str, Any]:
        """The saved state; empty when there is none.

        An unreadable or corrupt file is moved aside (``.corrupt``) and an empty
        state returned, with ``corrupt_note`` saying so: the check continues,
        and the position it lost is handled by the caller (see kernel_log).
        """
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        try:
            document = json.loads(raw)
            if not isinstance(document, dict) or document.get("version") != STATE_VERSION:
                raise ValueError("not a state document of this version")
        except (ValueError, UnicodeDecodeError) as err:
            aside = self.path.with_suffix(".corrupt")
            with contextlib.suppress(OSError):
                os.replace(self.path, aside)
            self.corrupt_note = f"state file {self.path} unreadable ({err}), moved to {aside.name}"
            return {"corrupt": True}
        return document

    def save(self, state: dict[str, Any]) -> None:
        """Write ``state`` atomically (temporary file in the same directory, then rename)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        document = {**state, "version": STATE_VERSION}
        document.pop("corrupt", None)
        tmp = self.path.with_suffix(f".tmp.{os.getpid()}")
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(document, handle, separators=(",", ":"), sort_keys=True)
        os.replace(tmp, self.path)


def read_boot_id(path: str) -> str:
    """The kernel's boot id (changes at every boot).

    Raises:
        OSError: It cannot be read (the caller reports the check as unknown).
    """
    value = Path(path).read_text(encoding="ascii", errors="replace").strip()
    if not value:
        raise OSError(f"{path} is empty")
    return value
