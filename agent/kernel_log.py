"""Incremental kernel-log scan for Xid, NVSwitch SXid and fallen-off-the-bus lines.

The fallback that still works when DCGM and ``nvidia-smi`` hang: the driver
logs every Xid to the kernel log. Each run reads only what was added since the
last one, from one of three sources:

* ``kmsg``: ``/dev/kmsg`` records, remembered by sequence number;
* ``journal``: ``journalctl -k`` (current boot), remembered by cursor;
* ``file``: a syslog file such as ``/var/log/kern.log``, remembered by
  (inode, device, offset). A rotated file (new inode) is finished from the
  saved offset in its rotated name (``kern.log.1``) before the new one is read
  from the start; a truncated file (smaller than the offset) is read from the
  start; an unfinished last line is left for the next run.

Findings are per boot: after a reboot (the boot id changed) only lines of the
current boot count, and nothing is ever read twice. With no saved position
(first run, or a state file that was lost) the current boot is read from its
start, so a fault that happened before the agent started is not missed.

The scan works on bytes: it searches each 1 MiB block for the two tokens
every interesting line contains (``Xid (`` and ``fallen off the bus``) and
parses only the lines around the hits, so garbage bytes, NULs and invalid
UTF-8 cost nothing and a 1 GB log scans at about the speed of ``grep -c``.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from typing import Any, NamedTuple

from agent.runner import run

CHUNK = 1 << 20
TOKENS = (b"Xid (", b"fallen off the bus")
BOOT_MARKER = b"Linux version "
_BANNER_LOOKBACK = 1024

_BUS = rb"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?"


class _Patterns:
    """The line patterns, compiled on first use: most runs find no hit and need none."""

    def __init__(self) -> None:
        self.xid = re.compile(
            rb"NVRM: Xid \((?:PCI:)?(?P<bus>" + _BUS + rb")(?: GPU-I:(?P<gi>\d{1,3}))?"
            rb"(?: GPU-CI:(?P<ci>\d{1,3}))?\):\s*(?P<xid>\d{1,5})(?P<rest>[^\n]*)"
        )
        self.sxid = re.compile(
            rb"(?P<dev>nvidia-nvswitch\d*): SXid \((?:PCI:)?(?P<bus>" + _BUS + rb")\):\s*"
            # The severity word is required: the driver's "<code>, Data {...}" and
            # "<code>, Severity N Engine ..." lines continue an event already read.
            rb"(?P<code>\d{1,6}),\s*(?P<sev>[Nn]on-[Ff]atal|[Ff]atal)(?P<rest>[^\n]*)"
        )
        self.gpu_off_bus = re.compile(
            rb"NVRM: GPU (?:at )?(?:PCI:)?(?P<bus>" + _BUS + rb"):? GPU has fallen off the bus"
        )
        self.banner_start = re.compile(rb"NVRM: The NVIDIA GPU (?:PCI:)?(?P<bus>" + _BUS + rb")")
        self.banner_end = re.compile(rb"NVRM: fallen off the bus and is not responding")
        self.noise = re.compile(r"^(?:pid=|name=|Ch [0-9A-Fa-f]+$)")


_compiled: _Patterns | None = None


def _patterns() -> _Patterns:
    global _compiled
    if _compiled is None:
        _compiled = _Patterns()
    return _compiled


_BANNER_TOKEN = b"NVRM: The NVIDIA GPU"
# kmsg record prefix "priority,sequence,microseconds,flags;": needed on every kmsg run.
# The kernel prints 64-bit numbers (20 digits at most); a longer run of digits
# is not a record's prefix, and converting it would fail (Python refuses over
# 4300 digits) and fail every later run on the same record.
_KMSG_PREFIX = re.compile(rb"(\d{1,20}),(\d{1,20}),(\d{1,20}),[^;\n]*;")
_CURSOR = b"-- cursor: "


class KernelLogError(RuntimeError):
    """The kernel log cannot be read (missing, no permission, journalctl failing)."""


class XidHit(NamedTuple):
    """One Xid line (or a fallen-off-the-bus banner, reported as Xid 79)."""

    xid: int
    bus: str
    gpu_instance: int | None = None
    compute_instance: int | None = None
    tail: str = ""
    banner: bool = False


class SxidHit(NamedTuple):
    """One NVSwitch SXid line."""

    device: str
    bus: str
    code: int
    fatal: bool
    tail: str = ""


class ScanOutcome:
    """What one run found, and the position to save for the next."""

    def __init__(self) -> None:
        """Start empty."""
        self.xids: list[XidHit] = []
        self.sxids: list[SxidHit] = []
        self.position: dict[str, Any] = {}
        self.bytes_read = 0
        self.notes: list[str] = []


def normalize_bus(raw: str) -> str:
    """``00000000:53:00.0`` / ``0000:53:00`` / ``PCI:0000:53:00`` -> ``0000:53:00``."""
    parts = raw.strip().removeprefix("PCI:").split(":")
    if len(parts) != 3:
        return raw.strip().lower()
    domain = parts[0][-4:].rjust(4, "0")
    return f"{domain}:{parts[1]}:{parts[2].split('.')[0]}".lower()


def _tail(rest: bytes) -> str:
    words = rest.decode("ascii", "replace").strip().lstrip(",").strip().split(", ")
    noise = _patterns().noise
    # Skipped by index: popping the list's head each time re-copies the rest,
    # quadratic on a line of many noise words (lines run up to 1 MiB).
    first = 0
    while first < len(words) and noise.match(words[first].strip()):
        first += 1
    return ", ".join(w.strip() for w in words[first:]).strip()


class _Collector:
    """Parses the lines around token hits; keeps hits in log order."""

    def __init__(self, banner_bus: str | None, seq_floor: int | None = None) -> None:
        self.banner_bus = banner_bus
        self.seq_floor = seq_floor  # kmsg: records at or below this were read before
        self._hits: list[tuple[int, XidHit | SxidHit]] = []

    def scan(self, buf: bytes | bytearray, lo: int, hi: int, base: int) -> None:
        """Scan ``buf[lo:hi]`` (complete lines only); ``base`` is the offset of ``buf[0]``."""
        seen: set[int] = set()
        for token in TOKENS:
            i = buf.find(token, lo, hi)
            while i >= 0:
                start = max(buf.rfind(b"\n", lo, i) + 1, lo)
                end = buf.find(b"\n", i, hi)
                end = hi if end < 0 else end
                if start not in seen:
                    seen.add(start)
                    self._line(bytes(buf[start:end]), buf, lo, start, base)
                i = buf.find(token, end, hi)
        if hi > lo:
            self._remember_banner(buf, lo, hi)

    def _line(self, line: bytes, buf: bytes | bytearray, lo: int, start: int, base: int) -> None:
        if self.seq_floor is not None:
            prefix = _KMSG_PREFIX.match(line)
            if prefix is None or int(prefix.group(2)) <= self.seq_floor:
                return  # a continuation line, or a record read in an earlier run
        hit: XidHit | SxidHit | None = None
        patterns = _patterns()
        if b"Xid (" in line:
            if match := patterns.xid.search(line):
                hit = XidHit(
                    xid=int(match["xid"]),
                    bus=normalize_bus(match["bus"].decode()),
                    gpu_instance=int(match["gi"]) if match["gi"] is not None else None,
                    compute_instance=int(match["ci"]) if match["ci"] is not None else None,
                    tail=_tail(match["rest"]),
                )
            elif match := patterns.sxid.search(line):
                hit = SxidHit(
                    device=match["dev"].decode(),
                    bus=normalize_bus(match["bus"].decode()),
                    code=int(match["code"]),
                    fatal=match["sev"].lower() == b"fatal",
                    tail=_tail(match["rest"]),
                )
        elif match := patterns.gpu_off_bus.search(line):
            hit = XidHit(
                79, normalize_bus(match["bus"].decode()), tail="GPU has fallen off the bus"
            )
        elif end_match := patterns.banner_end.search(line):
            # The three-line banner names the GPU two lines up, or in the last run;
            # /dev/kmsg delivers it as ONE record with the newlines escaped (\x0a),
            # so its own start comes first.
            before = bytes(buf[max(lo, start - _BANNER_LOOKBACK) : start])
            before += line[: end_match.start()]
            starts = list(patterns.banner_start.finditer(before))
            bus = normalize_bus(starts[-1]["bus"].decode()) if starts else self.banner_bus
            tail = "fallen off the bus and is not responding to commands"
            hit = XidHit(79, bus or "", tail=tail, banner=True)
        if hit is not None:
            self._hits.append((base + start, hit))

    def _remember_banner(self, buf: bytes | bytearray, lo: int, hi: int) -> None:
        window = bytes(buf[max(lo, hi - _BANNER_LOOKBACK) : hi])
        if _BANNER_TOKEN not in window:
            self.banner_bus = None
            return
        patterns = _patterns()
        starts = list(patterns.banner_start.finditer(window))
        if starts and not patterns.banner_end.search(window, starts[-1].end()):
            self.banner_bus = normalize_bus(starts[-1]["bus"].decode())
        else:
            self.banner_bus = None

    def finish(self, outcome: ScanOutcome) -> None:
        self._hits.sort(key=lambda item: item[0])
        hits, self._hits = self._hits, []
        for _, hit in hits:
            if isinstance(hit, XidHit):
                outcome.xids.append(hit)
            else:
                outcome.sxids.append(hit)


# ----------------------------------------------------------------------- files


def _scan_file(
    path: str,
    start: int,
    end: int,
    collector: _Collector,
    *,
    finish: bool,
    deadline: float = float("inf"),
) -> tuple[int, bool]:
    """Scan ``path`` from ``start`` to ``end``: (offset after the last complete line, stopped).

    With ``finish`` (a rotated file that will not grow) a last unterminated line
    is read too. At ``deadline`` (``time.monotonic()``) it stops after the last
    complete line read: the rest is for the next run, so a log flood never
    makes the cycle miss NPD's timeout.
    """
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    carry = 0  # bytes of an unfinished line kept at the front of buf
    pos = start  # file offset of buf[0]
    with open(path, "rb", buffering=0) as handle:
        handle.seek(start)
        remaining = end - start
        while remaining > 0:
            if time.monotonic() > deadline:
                return pos, True
            n = handle.readinto(view[carry : carry + min(CHUNK - carry, remaining)])
            if not n:
                break  # the file shrank under us: stop at what was read
            remaining -= n
            filled = carry + n
            last = buf.rfind(b"\n", 0, filled)
            if last < 0:
                if filled == CHUNK:  # a 1 MiB "line": garbage, skipped
                    pos, carry = pos + filled, 0
                else:
                    carry = filled
                continue
            collector.scan(buf, 0, last + 1, pos)
            carry = filled - (last + 1)
            buf[0:carry] = buf[last + 1 : filled]
            pos += last + 1
    if finish and carry:
        collector.scan(buf, 0, carry, pos)
        pos += carry
    return pos, False


def _boot_start(path: str, lo: int, hi: int) -> int | None:
    """Offset of the line holding the last boot marker in ``[lo, hi)``, if any."""
    if hi <= lo:
        return None
    import mmap

    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        hi = min(hi, len(mm))
        at = mm.rfind(BOOT_MARKER, lo, hi)
        if at < 0:
            return None
        return max(mm.rfind(b"\n", lo, at) + 1, lo)


def _line_start_after(path: str, offset: int) -> int:
    """The first line start at or after ``offset`` (``offset`` itself when it is 0)."""
    if offset == 0:
        return 0
    with open(path, "rb") as handle:
        handle.seek(offset - 1)
        while chunk := handle.read(65536):
            at = chunk.find(b"\n")
            if at >= 0:
                return handle.tell() - len(chunk) + at + 1
    return offset


_HEAD_BYTES = 256


def _head(path: str, length: int) -> str:
    """The first ``length`` bytes of ``path`` as hex: tells a reused inode from the file we read."""
    with open(path, "rb") as handle:
        return handle.read(length).hex()


def _rotated(path: str, inode: int, device: int, suffixes: tuple[str, ...]) -> str | None:
    """The rotated name of the file we were reading (same inode), if it still exists."""
    candidates = [path + suffix for suffix in suffixes]
    directory, base = os.path.split(path)
    with contextlib.suppress(OSError):
        candidates += sorted(
            os.path.join(directory or ".", name)
            for name in os.listdir(directory or ".")
            if name.startswith(base) and name != base
        )[:32]
    for candidate in candidates:
        with contextlib.suppress(OSError):
            st = os.stat(candidate)
            if st.st_ino == inode and st.st_dev == device:
                return candidate
    return None


def _read_file(
    path: str,
    saved: dict[str, Any] | None,
    boot_changed: bool,
    first_run_bytes: int,
    suffixes: tuple[str, ...],
    deadline: float,
) -> ScanOutcome:
    outcome = ScanOutcome()
    try:
        st = os.stat(path)
    except OSError as err:
        raise KernelLogError(f"kernel log {path}: {err.strerror or err}") from err
    known = saved is not None and saved.get("kind") == "file" and saved.get("path") == path
    collector = _Collector(saved.get("banner_bus") if known and saved else None)
    start: int
    try:
        if not known or saved is None:
            window = max(0, st.st_size - first_run_bytes)
            boot = _boot_start(path, window, st.st_size)
            start = boot if boot is not None else _line_start_after(path, window)
            outcome.notes.append(f"no saved position: read {path} from offset {start}")
        elif (saved["inode"], saved["dev"]) != (st.st_ino, st.st_dev) or (
            # The inode of a deleted file can be reused at once: compare the first bytes too.
            saved.get("head") is not None and _head(path, len(saved["head"]) // 2) != saved["head"]
        ):
            old = _rotated(path, saved["inode"], saved["dev"], suffixes)
            if old is not None and not boot_changed:
                old_size = os.stat(old).st_size
                if old_size > saved["offset"]:
                    _scan_file(old, saved["offset"], old_size, collector, finish=True)
                    outcome.bytes_read += old_size - saved["offset"]
                    collector.finish(outcome)  # the old file's lines come first
                outcome.notes.append(f"{path} was rotated: finished {old}")
            elif old is None:
                outcome.notes.append(f"{path} was rotated and its old file is gone")
            start = 0
        elif st.st_size < saved["offset"]:
            outcome.notes.append(f"{path} was truncated: read from the start")
            start = 0
        else:
            start = saved["offset"]
        if boot_changed and known:
            boot = _boot_start(path, start, st.st_size)
            if boot is not None:
                start = boot  # lines before the boot marker belong to the last boot
        end = st.st_size
        offset, stopped = start, False
        if end > start:
            offset, stopped = _scan_file(
                path, start, end, collector, finish=False, deadline=deadline
            )
        if stopped:
            outcome.notes.append(
                f"{path}: deadline reached, {end - offset} bytes left for next run"
            )
            end = offset
    except OSError as err:
        raise KernelLogError(f"kernel log {path}: {err.strerror or err}") from err
    outcome.bytes_read += max(0, end - start)
    collector.finish(outcome)
    try:
        head = _head(path, min(_HEAD_BYTES, offset))
    except OSError as err:
        raise KernelLogError(f"kernel log {path}: {err.strerror or err}") from err
    outcome.position = {
        "kind": "file",
        "path": path,
        "inode": st.st_ino,
        "dev": st.st_dev,
        "offset": offset,
        "head": head,
        "banner_bus": collector.banner_bus,
    }
    return outcome


# ------------------------------------------------------------------------ kmsg


def _last_seq(blob: bytes) -> int | None:
    end = len(blob)
    while end > 0:
        start = blob.rfind(b"\n", 0, end - 1) + 1
        if prefix := _KMSG_PREFIX.match(blob, start):
            return int(prefix.group(2))
        end = start
    return None


def _read_kmsg(
    path: str, saved: dict[str, Any] | None, boot_changed: bool, deadline: float
) -> ScanOutcome:
    outcome = ScanOutcome()
    chunks: list[bytes] = []
    lost = 0
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as err:
        raise KernelLogError(f"kernel log {path}: {err.strerror or err}") from err
    try:
        while True:
            try:
                # /dev/kmsg returns one record per read; a regular file (tests) any chunk.
                data = os.read(fd, 8192)
            except BlockingIOError:
                break  # no more records
            except BrokenPipeError:
                lost += 1  # records overwritten in the ring buffer before we got to them
                continue
            if not data:
                break
            chunks.append(data)
            if len(chunks) % 1024 == 0 and time.monotonic() > deadline:
                outcome.notes.append(f"{path}: stopped reading at the deadline")
                break
    except OSError as err:
        raise KernelLogError(f"kernel log {path}: {err.strerror or err}") from err
    finally:
        os.close(fd)
    blob = b"".join(chunks)
    known = saved is not None and saved.get("kind") == "kmsg" and saved.get("path") == path
    floor = int(saved["seq"]) if known and saved and not boot_changed else -1
    last = _last_seq(blob)
    if last is not None and last < floor:
        outcome.notes.append(f"{path}: sequence went back from {floor} to {last}; read it all")
        floor = -1
    if lost:
        outcome.notes.append(f"{path}: {lost} kernel message(s) overwritten before they were read")
    collector = _Collector(saved.get("banner_bus") if known and saved else None, floor)
    collector.scan(blob, 0, len(blob), 0)
    collector.finish(outcome)
    outcome.bytes_read = len(blob)
    outcome.position = {
        "kind": "kmsg",
        "path": path,
        "seq": last if last is not None else max(floor, -1),
        "banner_bus": collector.banner_bus,
    }
    return outcome


# --------------------------------------------------------------------- journal


def _read_journal(
    journalctl: str,
    directory: str,
    saved: dict[str, Any] | None,
    boot_changed: bool,
    timeout: float,
) -> ScanOutcome:
    outcome = ScanOutcome()
    known = saved is not None and saved.get("kind") == "journal" and saved.get("path") == directory
    cursor = saved.get("cursor") if known and saved and not boot_changed else None
    # -k is the current boot's kernel messages; the cursor skips what was read.
    argv = [journalctl, "-k", "--no-pager", "-o", "short-monotonic", "--show-cursor"]
    if directory:
        argv += ["-D", directory]
    if cursor:
        argv.append(f"--after-cursor={cursor}")
    result = run(argv, timeout)
    if result.status != "ok":
        raise KernelLogError(f"kernel log: {result.describe()}")
    blob = result.stdout
    at = blob.rfind(_CURSOR)
    if at >= 0 and (at == 0 or blob[at - 1 : at] == b"\n"):
        cursor = blob[at + len(_CURSOR) :].strip().decode("ascii", "replace") or cursor
        blob = blob[:at]
    collector = _Collector(saved.get("banner_bus") if known and saved else None)
    collector.scan(blob, 0, len(blob), 0)
    collector.finish(outcome)
    outcome.bytes_read = len(blob)
    outcome.position = {
        "kind": "journal",
        "path": directory,
        "cursor": cursor,
        "banner_bus": collector.banner_bus,
    }
    return outcome


# ---------------------------------------------------------------------- public


def scan_kernel_log(
    kind: str,
    target: str,
    saved: dict[str, Any] | None,
    *,
    boot_changed: bool,
    deadline: float,
    first_run_bytes: int = 256 * 1024 * 1024,
    rotated_suffixes: tuple[str, ...] = (".1",),
    journalctl: str = "journalctl",
    journal_timeout: float = 10.0,
) -> ScanOutcome:
    """Read what the kernel log gained since ``saved`` and return its Xid/SXid lines.

    Args:
        kind: ``file``, ``kmsg`` or ``journal``.
        target: The file or device path, or the journal directory ("" for the system journal).
        saved: The position returned by the previous run (``ScanOutcome.position``),
            or None on a first run / after the state was lost.
        boot_changed: The boot id differs from the one saved with ``saved``.
        deadline: ``time.monotonic()`` value by which reading must stop.
        first_run_bytes: With no position, how far back from the end of a file
            to look for the current boot's start.
        rotated_suffixes: Names a rotated file gets (``kern.log`` -> ``kern.log.1``).
        journalctl: The journalctl executable.
        journal_timeout: Seconds journalctl may take.

    Raises:
        KernelLogError: The source cannot be read.
    """
    if kind == "file":
        return _read_file(target, saved, boot_changed, first_run_bytes, rotated_suffixes, deadline)
    if kind == "kmsg":
        return _read_kmsg(target, saved, boot_changed, deadline)
    if kind == "journal":
        timeout = max(0.1, min(journal_timeout, deadline - time.monotonic()))
        return _read_journal(journalctl, target, saved, boot_changed, timeout)
    raise KernelLogError(f"unknown kernel log source kind {kind!r}")


def gpu_buses_from_proc(directory: str) -> dict[str, int]:
    """Bus -> index from ``/proc/driver/nvidia/gpus`` (NVML numbers GPUs in PCI bus order)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return {}
    buses = sorted({normalize_bus(name) for name in names if name.count(":") == 2})
    return {bus: index for index, bus in enumerate(buses)}
