"""``nvidia-smi -q``: GPU count, the driver's recovery action, row-remapping state, lost GPUs.

Read as text (the format is stable across drivers: ``Key : Value`` lines under
``GPU <bus>`` headers). What each state means, as DCGM reports the same NVML
fields (so the ladder treats both sources alike):

* ``GPU Recovery Action`` other than None: the driver's action (the one Xid
  154 logs), reported as Xid 154 evidence with that action;
* ``Remapped Rows / Pending: Yes``: DCGM error 85 (reset to apply the remap);
* ``Remapped Rows / Remapping Failure Occurred: Yes``: DCGM error 80 (RMA criterion);
* ``Retired Pages / Pending Page Blacklist: Yes`` (pre-Ampere GPUs; newer drivers
  say ``Pending Page Retirement``): DCGM error 6 (reset to retire the page);
* ``Unable to determine the device handle for GPU <bus>``: DCGM error 120 (lost),
  on stdout or stderr (nvidia-smi prints it on either, depending on the driver);
* fewer GPUs than expected: a note (quarantine and diagnose);
* fewer ``GPU <bus>`` sections than ``Attached GPUs`` says: the output was cut
  short, and the state of the GPUs it does not show is unknown (never healthy).

GPU indices are NVML's: GPUs in PCI bus order.
"""

from __future__ import annotations

import re
import time

from agent.config import AgentConfig
from agent.findings import Problem
from agent.kernel_log import normalize_bus
from agent.runner import ToolResult, head

SOURCE = "nvidia-smi"
_BUS = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?"
_HEADER = re.compile(r"^GPU (" + _BUS + r")\s*$")
_LOST = re.compile(
    r"Unable to determine the device handle for (?:GPU|gpu)\s*(?P<bus>"
    + _BUS
    + r")\s*:?\s*(?P<why>.*)"
)

# Words nvidia-smi prints for NVML's recovery actions (numbers as in catalog.RECOVERY_ACTIONS).
RECOVERY_WORDS: dict[str, int] = {
    "none": 0,
    "reset": 1,
    "gpu reset": 1,
    "gpu reset required": 1,
    "reboot": 2,
    "node reboot": 2,
    "node reboot required": 2,
    "drain p2p": 3,
    "drain and reset": 4,
    "recover imex domain": 5,
    "bus reset": 6,
    "system reboot": 7,
}
_PENDING_RETIREMENT_KEYS = frozenset({"Pending Page Blacklist", "Pending Page Retirement"})
_NOT_SUPPORTED = frozenset({"n/a", "not supported", "[n/a]", "unknown error"})


class GpuRecord:
    """One ``GPU <bus>`` section."""

    def __init__(self, bus: str) -> None:
        """A GPU section for ``bus``; fields filled while parsing."""
        self.bus = bus
        self.recovery_action: str | None = None
        self.remap_pending: str | None = None
        self.remap_failure: str | None = None
        self.page_retirement_pending: str | None = None


class SmiReport:
    """What ``nvidia-smi -q`` printed."""

    def __init__(self) -> None:
        """Empty report, filled by :func:`parse_query`."""
        self.attached: int | None = None
        self.gpus: list[GpuRecord] = []
        self.lost: dict[str, str] = {}
        self.no_devices = False
        self.no_driver: str | None = None


def parse_query(text: str) -> SmiReport:
    """Parse ``nvidia-smi -q`` output (unknown lines are ignored).

    Substring tests come before any regex: an 8-GPU report has thousands of lines.
    """
    report = SmiReport()
    current: GpuRecord | None = None
    section = ""
    for line in text.splitlines():
        if line.startswith("GPU ") and (header := _HEADER.match(line)):
            current = GpuRecord(bus=normalize_bus(header.group(1)))
            report.gpus.append(current)
            section = ""
            continue
        if "device handle" in line and (lost := _LOST.search(line)):
            report.lost[normalize_bus(lost["bus"])] = lost["why"].strip() or "device handle lost"
            continue
        if "No devices were found" in line:
            report.no_devices = True
            continue
        if "communicate with the NVIDIA driver" in line:
            report.no_driver = line.strip()
            continue
        key, colon, value = line.partition(":")
        if not colon:
            stripped = line.strip()
            if stripped and len(line) - len(line.lstrip()) <= 4:
                section = stripped  # "    Remapped Rows"
            continue
        indent = len(key) - len(key.lstrip())
        key, value = key.strip(), value.strip()
        if key == "Attached GPUs" and value.isdigit():
            report.attached = int(value)
        if current is None:
            continue
        if indent <= 4:
            section = ""
        if key == "GPU Recovery Action":
            current.recovery_action = value
        elif section == "Remapped Rows" and key == "Pending":
            current.remap_pending = value
        elif section == "Remapped Rows" and key == "Remapping Failure Occurred":
            current.remap_failure = value
        elif section == "Retired Pages" and key in _PENDING_RETIREMENT_KEYS:
            current.page_retirement_pending = value
    return report


class SmiOutcome:
    """What the nvidia-smi check concluded."""

    def __init__(
        self,
        problems: list[Problem] | None = None,
        unknown: str | None = None,
        buses: dict[str, int] | None = None,
    ) -> None:
        """Problems, or why the state is unknown; ``buses``: the map to remember, if trustworthy."""
        self.problems = problems or []
        self.unknown = unknown
        self.buses = buses
        self.recovery_none: set[int] = set()  # GPUs whose driver needs no recovery
        self.detail = ""


_RECOVERY_NUMBER = re.compile(r"^(?:0x)?([0-9a-f]+)\b")


def _recovery_number(word: str) -> int | None:
    text = word.strip().lower()
    if text in RECOVERY_WORDS:
        return RECOVERY_WORDS[text]
    if match := _RECOVERY_NUMBER.match(text):
        hexadecimal = text.startswith("0x")
        # Leading zeros dropped, so a long number is a large one: no action is
        # above 15, and converting thousands of digits is slow or refused.
        digits = match.group(1).lstrip("0") or "0"
        if len(digits) > 2 or not (hexadecimal or digits.isdigit()):
            return None  # "12ab" is no decimal number
        value = int(digits, 16 if hexadecimal else 10)
        return value if value <= 15 else None
    return None


def evaluate(result: ToolResult, config: AgentConfig, saved_buses: dict[str, int]) -> SmiOutcome:
    """Turn an ``nvidia-smi -q`` run into problems, or say why the GPUs' state is unknown.

    Args:
        result: The run.
        config: For the expected GPU count.
        saved_buses: Bus -> index from the last complete run, used when GPUs are missing.
    """
    if result.status in ("hung", "missing", "error"):
        return SmiOutcome(unknown=f"GPU state unknown: {result.describe()}")
    # A lost GPU's "Unable to determine the device handle" may come on stderr.
    # Output past MAX_PARSED_OUTPUT is not read: the GPUs it would have shown
    # count as cut short (unknown), what the rest shows still counts.
    stdout = head(result.stdout).decode("utf-8", "replace")
    report = parse_query(stdout + "\n" + head(result.stderr).decode("utf-8", "replace"))
    now = time.time()

    def problem(**kw: object) -> Problem:
        return Problem(source=SOURCE, observed_at=now, **kw)  # type: ignore[arg-type]

    if report.no_driver:
        text = (
            f"nvidia-smi cannot reach the NVIDIA driver (not loaded or wedged): {report.no_driver}"
        )
        return SmiOutcome(problems=[problem(kind="note", text=text[:400])])
    if not report.gpus and not report.lost and not report.no_devices:
        reason = result.describe() if result.status == "failed" else "output lists no GPU"
        return SmiOutcome(unknown=f"GPU state unknown: nvidia-smi -q {reason}")
    expected, expected_from = config.expected_gpu_count()
    if report.no_devices and expected is None:
        return SmiOutcome(
            unknown=f"nvidia-smi found no GPU and no GPU count is expected ({expected_from})"
        )

    present = sorted({g.bus for g in report.gpus} | set(report.lost))
    count = len(present)
    # The header counts GPUs the output never shows: it was cut short. The header
    # must not stand in for the GPUs it lost; what the shown GPUs say still counts.
    cut_short = report.attached is not None and report.attached > count
    short = not cut_short and expected is not None and count < expected
    # NVML numbers GPUs in bus order; with a GPU gone, today's order would shift
    # the others, so the map saved from a complete run is used instead.
    current = {bus: index for index, bus in enumerate(present)}
    buses = saved_buses if (short or cut_short) and saved_buses else current
    outcome = SmiOutcome(buses=None if short or cut_short else current)
    if cut_short:
        outcome.unknown = (
            f"GPU state unknown: nvidia-smi -q output cut short ({report.attached} attached,"
            f" {count} shown)"
        )
    elif short:
        missing = sorted(set(saved_buses) - set(present))
        where = f": missing {', '.join(missing[:8])}" if missing else ""
        outcome.problems.append(
            problem(
                kind="note", text=f"GPU count {count}, expected {expected} ({expected_from}){where}"
            )
        )
    elif expected is not None and count > expected:
        outcome.unknown = f"GPU count {count} above the expected {expected} ({expected_from})"
    for bus, why in sorted(report.lost.items()):
        outcome.problems.append(
            problem(
                kind="dcgm",
                error_id=120,
                gpu_index=buses.get(bus),
                pci_bus=bus,
                test="nvidia-smi",
                text=f"GPU {bus} lost: {why}"[:300],
            )
        )
    for gpu in report.gpus:
        index = buses.get(gpu.bus)
        action_word = (gpu.recovery_action or "").strip()
        if action_word and action_word.lower() not in _NOT_SUPPORTED:
            action = _recovery_number(action_word)
            if action is None:
                text = (
                    f"GPU {index} ({gpu.bus}) reports unrecognised recovery action {action_word!r}"
                )
                outcome.problems.append(problem(kind="note", text=text[:300]))
            elif action == 0 and index is not None:
                outcome.recovery_none.add(index)
            elif action:
                outcome.problems.append(
                    problem(
                        kind="xid",
                        xid=154,
                        gpu_index=index,
                        pci_bus=gpu.bus,
                        recovery_action=action,
                        text="nvidia-smi",
                    )
                )
        if (gpu.remap_failure or "").lower() == "yes":
            outcome.problems.append(
                problem(
                    kind="dcgm",
                    error_id=80,
                    gpu_index=index,
                    pci_bus=gpu.bus,
                    test="nvidia-smi row remapper",
                    text="Remapping Failure Occurred: Yes",
                )
            )
        if (gpu.remap_pending or "").lower() == "yes":
            outcome.problems.append(
                problem(
                    kind="dcgm",
                    error_id=85,
                    gpu_index=index,
                    pci_bus=gpu.bus,
                    test="nvidia-smi row remapper",
                    text="Pending: Yes",
                )
            )
        if (gpu.page_retirement_pending or "").lower() == "yes":
            outcome.problems.append(
                problem(
                    kind="dcgm",
                    error_id=6,
                    gpu_index=index,
                    pci_bus=gpu.bus,
                    test="nvidia-smi retired pages",
                    text="Pending Page Blacklist: Yes",
                )
            )
    outcome.detail = f"{len(report.gpus)} GPU(s) answer nvidia-smi"
    return outcome
