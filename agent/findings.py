"""Findings: what the checks report, turned into evidence, the message and the exit code.

Checks describe problems as :class:`Problem` records (stdlib only, so the
healthy path never imports pydantic or the domain package). Only when a cycle
has something to report are they turned into the project's evidence models
(``XidEvidence``, ``DcgmEvidence``, ``EfaEvidence``) or notes, and written
with :func:`gpu_remediation.npd_message.format_message`, the format the
watcher reads back with ``parse_condition_message``.

Degradation (``kind="degraded"``, the ``gpu-degraded`` check and its own
``GpuDegraded`` condition) has no evidence model yet: it is written as a note
in a fixed grammar (:func:`degraded_text`), one finding per GPU and signal::

    "Degraded on GPU " I " (" BUS ") [" WHAT "]: " OBSERVED
        ", expected " EXPECTED " (" N "+ cycles)"

``WHAT`` is ``pcie_width``, ``pcie_gen`` or ``clock_event:<reason>``; ``N`` is the
configured number of consecutive cycles, so the words stay the same while the
state does (NPD updates a condition when its message changes).

The ``efa-degraded`` check (condition ``EfaDegraded``) writes the same grammar
with an EFA port in place of the GPU, ``WHAT`` one of ``efa_port_rate`` and
``efa_counter:<name>``, and a rate threshold rather than a reading for a counter
(the measured rate goes to the log, so the words stay the same)::

    "Degraded on EFA " DEVICE "/" PORT " [efa_port_rate]: " OBSERVED " Gb/sec,
        expected " EXPECTED " Gb/sec (" N "+ cycles)"
    "Degraded on EFA " DEVICE "/" PORT " [efa_counter:" NAME "]: " T "+/min,
        expected under " T "/min (over " S "+ s)"

Exit codes follow Node Problem Detector's custom-plugin contract.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

if TYPE_CHECKING:
    from gpu_remediation.npd_message import Finding

EXIT_OK = 0
EXIT_PROBLEM = 1
EXIT_UNKNOWN = 2

Kind = Literal["xid", "dcgm", "efa", "note", "degraded"]
KINDS = ("xid", "dcgm", "efa", "note", "degraded")
DEGRADED_HEAD = "Degraded"


class Problem(NamedTuple):
    """One finding, before it becomes evidence. Fields mirror the evidence models."""

    kind: Kind
    source: str
    text: str = ""
    xid: int | None = None
    gpu_index: int | None = None
    pci_bus: str | None = None
    recovery_action: int | None = None
    error_id: int | None = None
    severity: int | None = None
    test: str | None = None
    efa_check: str | None = None
    device: str | None = None
    fault_class: str = "unknown"
    observed_at: float = 0.0
    # Degradation: what is slow (pcie_width, pcie_gen, clock_event:<reason>), as seen
    # and as it should be ("8x" / "16x", "Active" / "Not Active").
    what: str | None = None
    observed: str | None = None
    expected: str | None = None

    @property
    def key(self) -> str:
        """Identity across cycles: the same fault on the same GPU or device."""
        where = self.gpu_index if self.gpu_index is not None else (self.pci_bus or "-")
        if self.kind == "xid":
            return f"xid/{self.xid}/{where}"
        if self.kind == "dcgm":
            return f"dcgm/{self.error_id}/{where}/{self.test}"
        if self.kind == "efa":
            return f"efa/{self.efa_check}/{self.device or '-'}"
        if self.kind == "degraded":
            return f"degraded/{self.what}/{self.pci_bus or self.device or where}"
        return f"note/{self.text}"

    def to_json(self) -> dict[str, Any]:
        """A plain dict for the state file."""
        return {k: v for k, v in self._asdict().items() if v is not None}

    @classmethod
    def from_json(cls, data: Any) -> Problem | None:
        """Read a saved problem back; None when the entry is not one (old or damaged state)."""
        if not isinstance(data, dict) or data.get("kind") not in KINDS:
            return None
        try:
            return cls(**{k: v for k, v in data.items() if k in cls._fields})
        except TypeError:
            return None


def to_finding(problem: Problem) -> Finding:
    """The evidence (or note) a problem stands for.

    A value the evidence models refuse (an Xid above 1023, say) still reports
    the problem, as a note naming it.
    """
    from pydantic import ValidationError

    from gpu_remediation.npd_message import Note

    try:
        return _evidence(problem)
    except ValidationError as err:
        what = problem.key if problem.kind != "note" else "note"
        detail = "; ".join(str(e["msg"]) for e in err.errors())
        return Note(text=f"finding {what} not representable as evidence ({detail})"[:1024])


def _evidence(problem: Problem) -> Finding:
    from datetime import UTC, datetime

    from gpu_remediation.models import (
        DcgmEvidence,
        EfaEvidence,
        FaultClass,
        XidEvidence,
    )
    from gpu_remediation.npd_message import Note

    observed = datetime.fromtimestamp(problem.observed_at or time.time(), UTC)
    common: dict[str, Any] = {"observed_at": observed, "source": problem.source}
    if problem.kind == "xid" and problem.xid is not None:
        return XidEvidence(
            **common,
            message=problem.text[:4096],
            xid=problem.xid,
            gpu_index=problem.gpu_index,
            pci_bus=problem.pci_bus,
            recovery_action=problem.recovery_action,
        )
    if problem.kind == "dcgm":
        return DcgmEvidence(
            **common,
            message=problem.text[:4096],
            check="health",
            error_id=problem.error_id,
            severity=problem.severity,
            gpu_index=problem.gpu_index,
            test=problem.test,
        )
    if problem.kind == "efa" and problem.efa_check is not None:
        return EfaEvidence(
            **common,
            message=problem.text[:4096],
            check=problem.efa_check,
            device=problem.device,
        )
    if problem.kind == "degraded":
        return Note(text=degraded_text(problem)[:1024], fault_class=FaultClass(problem.fault_class))
    return Note(text=problem.text[:1024] or "problem", fault_class=FaultClass(problem.fault_class))


def degraded_text(problem: Problem) -> str:
    """A degradation finding in the grammar of the module docstring.

    ``text`` is the persistence (``"10+ cycles"``). Written from values the
    check parsed (numbers and fixed words), so nothing here comes raw from a tool.
    """
    gpu = f" on GPU {problem.gpu_index}" if problem.gpu_index is not None else ""
    if problem.device and problem.gpu_index is None and not problem.pci_bus:
        gpu = f" on EFA {problem.device}"
    bus = f" ({problem.pci_bus})" if problem.pci_bus else ""
    since = f" ({problem.text})" if problem.text else ""
    return (
        f"{DEGRADED_HEAD}{gpu}{bus} [{problem.what}]: {problem.observed},"
        f" expected {problem.expected}{since}"
    )


def _fit(text: str, max_bytes: int) -> str:
    data = text.encode("ascii", "replace")
    return text if len(data) <= max_bytes else data[: max_bytes - 3].decode() + "..."


def render(
    problems: list[Problem], unknowns: list[str], *, ok_text: str, max_bytes: int
) -> tuple[int, str]:
    """The exit code and stdout of a cycle.

    Problems win (exit 1) and come first, most severe first, with what could
    not be checked after them; with no problem, anything that could not be
    checked makes the result unknown (exit 2); otherwise healthy (exit 0).
    """
    if not problems and not unknowns:
        return EXIT_OK, _fit(ok_text, max_bytes)
    from gpu_remediation.npd_message import Note, format_message

    trailer = [Note(text=_fit(u, 1000)) for u in unknowns]
    message = format_message(
        [to_finding(p) for p in problems], max_bytes=max_bytes, trailer=trailer
    )
    return (EXIT_PROBLEM if problems else EXIT_UNKNOWN), message
