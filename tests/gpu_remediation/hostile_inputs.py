"""Hostile 64 KB inputs for the parser guards, and the time bound every parser must keep.

Shared by tests/gpu_remediation/test_parsers_linear.py (the domain's and the
activities' parsers) and tests/agent/test_parsers_linear.py (the node agent's).
Each input repeats one short unit to 64 KB: a word, a DCGM template's opening
words, a kernel-log or nvidia-smi line head, a digit, a bracket, with nothing,
a space or a newline between the repeats. Those are the shapes that
make a backtracking regex re-read what it has read (a long run of one word, a
template prefix that never completes, one endless line, a line per character).

The bound is a guard, not a benchmark: it only has to tell linear from
super-linear. Measured on the 2-core machine these were written on (issue 35),
over every unit, separator and ending below: the slowest parser takes under
90 ms on its worst input (DCGM health JSON with a failing system per line,
each message matched against every DCGM template and made evidence); most take
a few milliseconds. Before issue 35 the DCGM template matcher did not finish a
64 KB input (a 1 KB message took 172 s), the Xid 154 recovery-action regex took
3.8 s, dcgmi's "watches not enabled" regex 4.6 s, and writing a condition
message of 20,000 findings 2.5 s. One second is over ten times the first and
far below the others; every parser gets the same bound.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import strategies as st

from gpu_remediation.dcgm_errors import DCGM_ERROR_META

LINEAR_GUARD_MARKER = (
    "linear_guard: a guard that a parser stays linear in its input (issue 35): a generous "
    "time bound on hostile 64 KB inputs, not a benchmark"
)
"""The marker of the guards, registered by tests/gpu_remediation/conftest.py and tests/agent's."""

SIZE = 64 * 1024
"""Characters of every hostile input."""

BOUND_SECONDS = 1.0
"""What one parser may take on one 64 KB input (see the module docstring)."""

UNITS = (
    # Runs of one word, and the opening words of DCGM templates that never complete.
    "gpu ",
    "GPU",
    "Detected ",
    "detected",
    "Detected 12 GPU for ",
    "Detected 3 volatile double-bit ECC error(s) in GPU ",
    "GPU 3 had uncorrectable memory errors and ",
    "GPU 0 was unsuccessfully written to by GPU 1 over ",
    "More than 5 single-bit ECC error(s) detected in GPU ",
    "dete",
    # Xid 154's recovery action, dcgmi's "watches are not enabled".
    "recovery action changed from 0x0 ",
    "recovery action changed from 0xffffffff ",
    "watch",
    "watches are ",
    "x not enabled",
    # Kernel log lines and their parts.
    "Xid (",
    "NVRM: Xid (PCI:0000:53:00): 79, ",
    "NVRM: Xid (PCI:0000:53:00): 154, pid=1, ",
    "NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 ",
    "pid=1, ",
    "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, ",
    "NVRM: GPU at PCI:0000:53:00: GPU has fallen off the bus",
    "NVRM: The NVIDIA GPU 0000:53:00.0",
    "fallen off the bus ",
    "6,123,456,-;",
    # Condition messages (the agent's grammar).
    "Xid 79 on GPU 3 (0000:53:00): ",
    "Xid 145 (0018:01:00): NVLink5 error (RLW_RXPIPE Nonfatal), no action needed; ",
    "DCGM error 85 on GPU 2 [Memory]: ",
    "EFA link (rdmap0): ",
    "; EFA link ",
    "; ",
    # nvidia-smi -q.
    "GPU 00000000:53:00.0",
    "Unable to determine the device handle for GPU 0000:53:00.0: ",
    "Unable to determine the device handle for GPU1: ",
    "Unable to determine the device handle for GPU1: 0000:04:00.0: ",
    "    Remapped Rows\n        Pending : Yes\n",
    "    Retired Pages\n        Pending : Yes\n",
    "    GPU Reset Status\n        Reset Required : Yes\n",
    "GPU Recovery Action : ",
    # NCCL's all_reduce_perf.
    "# Out of bounds values : 0 OK",
    "   1024  256  float  sum  -1  1.0  1.0  1.0  0  1.0  1.0  1.0  0",
    # Characters.
    "1",
    "0",
    "a",
    " ",
    "\t",
    "{",
    "[",
    '{"value": ',
    '"',
    "\\",
    "\u00e9",
    "\x00",
)

SEPARATORS = ("", " ", "\n", ", ", "\r\n")
"""Between two repeats: nothing (one endless line), a space, a newline (many lines), ..."""

# Ends that make a matcher do all its work: a DCGM message whose template
# completes only at the very end, or one character that fails every pattern.
_ENDINGS = (
    "",
    "x",
    " GPU 2 had memory errors and row remappings are pending",
    " recovery action changed from 0x0 (None) to 0x2 (Node Reboot)",
    " watches are not enabled",
    "\n",
)


def fill(unit: str, separator: str = "", ending: str = "") -> str:
    """``unit`` and ``separator`` repeated to :data:`SIZE` characters, ``ending`` last."""
    step = unit + separator
    body = step * (SIZE // len(step) + 1)
    return body[: SIZE - len(ending)] + ending


KNOWN_SHAPES: dict[str, str] = {
    **{f"{unit!r} x N": fill(unit) for unit in UNITS},
    **{f"{unit!r} per line": fill(unit, "\n") for unit in UNITS if "\n" not in unit},
    "one word then a template": fill("gpu ", ending=_ENDINGS[2]),
    "Xid 154 heads then a change": fill("recovery action changed from 0x0 ", ending=_ENDINGS[3]),
    "watch then the phrase": fill("watch", ending=_ENDINGS[4]),
}
"""Every unit repeated with no separator and one per line, plus a few with a telling end."""


def _template_prefixes() -> list[str]:
    """The opening half of every DCGM message template, conversions filled in."""
    prefixes = []
    for meta in DCGM_ERROR_META.values():
        text = meta.message.replace("%%", "%")
        for conversion in ("%u", "%d", "%ld", "%lld", "%s", "%.1f", "%.2f", "%zu"):
            text = text.replace(conversion, "7")
        if len(text) > 20:
            prefixes.append(text[: len(text) // 2])
    return prefixes


@st.composite
def hostile_texts(draw: st.DrawFn) -> str:
    """A 64 KB text: one unit (or a template's opening half) repeated, and an ending."""
    unit = draw(st.sampled_from(UNITS) | st.sampled_from(_template_prefixes()))
    separator = draw(st.sampled_from(SEPARATORS))
    ending = draw(st.sampled_from(_ENDINGS))
    return fill(unit, separator, ending)


def health_document(text: str) -> str:
    """``dcgmi health -c -j`` JSON with ``text`` as one failing system's message, a chunk a line."""
    system = {"value": "Failure", "overflow": text.split("\n")}
    return _health_json({"Memory system": system})


def health_document_of_systems(text: str) -> str:
    """``dcgmi health -c -j`` JSON with a failing system per line of ``text``, up to :data:`SIZE`.

    Many short messages: each is matched against every DCGM template and
    becomes evidence, the costliest shape per byte of a health document.
    """
    systems: dict[str, object] = {}
    size = 0
    for number, line in enumerate(text.split("\n")):
        size += len(line) + 64  # the JSON around a system
        if size > SIZE:
            break
        systems[f"System {number} system"] = {"value": "Failure", "overflow": [line]}
    return _health_json(systems)


def _health_json(systems: dict[str, object]) -> str:
    gpu = {"value": "Failure", "children": {"Errors": {"children": systems}}}
    body = {"Overall Health": {"value": "Failure"}, "GPU": {"children": {"0": gpu}}}
    return json.dumps({"body": body, "header": ["Health Monitor Report"]})


class TooSlow(BaseException):
    """A parser overran the bound (a BaseException, so no parser's ``except`` swallows it)."""


@contextmanager
def _alarm(seconds: float, what: str) -> Iterator[None]:
    """Interrupt the test after ``seconds``: a super-linear parser fails fast, not in hours.

    Python's regex engine checks for signals while it matches, so the alarm
    stops even a backtracking search. pytest-timeout's own alarm, if any, is
    put back afterwards with the time it had left.
    """

    def expire(signum: int, frame: Any) -> None:
        raise TooSlow(f"{what}: still running after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    previous_left, _ = signal.getitimer(signal.ITIMER_REAL)
    started = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if previous_left:
            left = previous_left - (time.monotonic() - started)
            signal.setitimer(signal.ITIMER_REAL, max(left, 0.001))


def timed(what: str, call: Callable[..., object], *args: object) -> float:
    """Run ``call(*args)``; fail the test if it overruns :data:`BOUND_SECONDS`. Returns its seconds.

    The parser may raise its documented error (callers wrap it); anything else
    propagates and fails the test too.
    """
    started = time.perf_counter()
    with _alarm(BOUND_SECONDS * 2, what):
        call(*args)
    elapsed = time.perf_counter() - started
    assert elapsed <= BOUND_SECONDS, f"{what}: {elapsed:.2f} s on {SIZE} characters"
    return elapsed
