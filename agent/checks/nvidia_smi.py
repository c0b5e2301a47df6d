"""``nvidia-smi -q``: GPU count, the driver's recovery action, row-remapping state, lost GPUs.

Read as text (the format is stable across drivers: ``Key : Value`` lines under
``GPU <bus>`` headers). What each state means, as DCGM reports the same NVML
fields (so the ladder treats both sources alike); docs/tool-outputs.md names the
real output each reading was checked against:

* ``GPU Recovery Action`` other than None (drivers 550 and later): the driver's
  action (the one Xid 154 logs), reported as Xid 154 evidence with that action;
* ``GPU Reset Status`` (drivers before 550, which print no recovery action; NVML
  deprecated its two fields for the recovery action): ``Drain and Reset
  Recommended: Yes`` is action 4 (drain and reset), ``Reset Required: Yes``
  action 1 (GPU reset), reported the same way. Where a driver prints both, the
  recovery action decides unless it asks for nothing and the reset status says Yes;
* ``Remapped Rows / Pending: Yes``: DCGM error 85 (reset to apply the remap);
* ``Remapped Rows / Remapping Failure Occurred: Yes``: DCGM error 80 (RMA criterion);
* ``Retired Pages / Pending Page Blacklist: Yes`` (pre-Ampere GPUs; drivers
  before about 418 print the key as ``Pending``, some newer ones
  ``Pending Page Retirement``): DCGM error 6 (reset to retire the page), the
  pre-Ampere counterpart of a pending row remap;
* ``Unable to determine the device handle for GPU <bus>``: DCGM error 120 (lost),
  on stdout or stderr (nvidia-smi prints it on either, depending on the driver).
  Drivers print it as ``GPU <bus>``, ``GPU<bus>``, ``gpu <bus>`` (``-L``) and,
  from 580, ``GPU<index>: <bus>``; with no bus (``GPU<index>: <error>``) the
  index places it, through the last complete run's bus map when there is one;
* fewer GPUs than expected: a note (quarantine and diagnose);
* fewer ``GPU <bus>`` sections than ``Attached GPUs`` says: the output was cut
  short, and the state of the GPUs it does not show is unknown (never healthy).

GPU indices are NVML's: GPUs in PCI bus order.

The parser also keeps what the ``gpu-degraded`` check reads (agent/checks/gpu_degraded.py):
``Performance State``, ``Utilization / Gpu``, ``GPU Link Info`` (``PCIe Generation``
and ``Link Width``, ``Max`` and ``Current``) and the ``Clocks Event Reasons``
(drivers 535 and later; ``Clocks Throttle Reasons`` before).
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
# "GPU 0000:0b:00.0: Unknown Error" (520), "GPU0000:91:00.0: ..." (525-560),
# "gpu 0000:3b:00.0: ..." (-L), "GPU1: 0000:04:00.0: ..." (580), "GPU0: Unknown Error".
_LOST = re.compile(
    r"Unable to determine the device handle for (?:GPU|gpu)(?:(?P<index>\d{1,3}):)?\s*(?P<bus>"
    + _BUS
    + r")?\s*:?\s*(?P<why>.*)"
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
# Under "Retired Pages": "Pending" (drivers before about 418, e.g. 410.48 on a V100),
# "Pending Page Blacklist" (418 to 580), "Pending Page Retirement".
_PENDING_RETIREMENT_KEYS = frozenset(
    {"Pending", "Pending Page Blacklist", "Pending Page Retirement"}
)
# Under "GPU Reset Status" (NVML_FI_DEV_RESET_STATUS / _DRAIN_AND_RESET_STATUS):
# the recovery action each "Yes" stands for (numbers as in catalog.RECOVERY_ACTIONS).
_RESET_STATUS_ACTIONS = {"Drain and Reset Recommended": 4, "Reset Required": 1}
_NOT_SUPPORTED = frozenset({"n/a", "not supported", "[n/a]", "unknown error"})
# The section of clock-event reasons: "Clocks Event Reasons" from driver 535 (NVML
# renamed throttle reasons to clock events), "Clocks Throttle Reasons" before. Newer
# drivers add "Clocks Event Reasons Counters" (microseconds per reason): not read.
CLOCK_EVENT_SECTIONS = frozenset({"Clocks Event Reasons", "Clocks Throttle Reasons"})
# Reason name as nvidia-smi prints it -> the agent's name for it (NVML's bit in nvml.h:
# nvmlClocksEventReason* / nvmlClocksThrottleReason*). Only these are kept.
CLOCK_EVENT_KEYS: dict[str, str] = {
    "Idle": "idle",  # 0x1
    "Applications Clocks Setting": "applications_clocks_setting",  # 0x2
    "SW Power Cap": "sw_power_cap",  # 0x4
    "HW Slowdown": "hw_slowdown",  # 0x8
    "Sync Boost": "sync_boost",  # 0x10
    "SW Thermal Slowdown": "sw_thermal_slowdown",  # 0x20
    "HW Thermal Slowdown": "hw_thermal_slowdown",  # 0x40
    "HW Power Brake Slowdown": "hw_power_brake_slowdown",  # 0x80
    "Display Clock Setting": "display_clock_setting",  # 0x100
}
_LINK_SUBSECTIONS = {"PCIe Generation": "gen", "Link Width": "width"}


class GpuRecord:
    """One ``GPU <bus>`` section."""

    def __init__(self, bus: str) -> None:
        """A GPU section for ``bus``; fields filled while parsing."""
        self.bus = bus
        self.recovery_action: str | None = None
        self.remap_pending: str | None = None
        self.remap_failure: str | None = None
        self.page_retirement_pending: str | None = None
        self.reset_status: dict[str, str] = {}  # "GPU Reset Status" key -> value
        # For the gpu-degraded check (None: not printed, N/A or not a number).
        self.performance_state: str | None = None  # "P0" .. "P12"
        self.utilization_gpu: int | None = None  # percent
        self.pcie_gen_max: int | None = None
        self.pcie_gen_current: int | None = None
        self.link_width_max: int | None = None  # lanes ("16x" -> 16)
        self.link_width_current: int | None = None
        self.clock_events: dict[str, bool] = {}  # CLOCK_EVENT_KEYS name -> Active
        # ECC Errors / Volatile: each corrected-error count printed since the driver
        # loaded (SRAM and DRAM Correctable on Turing and later; Single Bit / Total
        # before); None for one that is not a number.
        self.ecc_correctable_parts: list[int | None] = []

    @property
    def ecc_volatile_correctable(self) -> int | None:
        """Corrected ECC errors since the driver loaded; None unless every part is a number."""
        parts = self.ecc_correctable_parts
        if not parts or any(part is None for part in parts):
            return None
        return sum(part for part in parts if part is not None)


def counter_number(value: str) -> int | None:
    """``"12"`` -> 12; None for N/A or anything but at most 20 digits (a u64)."""
    text = value.strip()
    if 0 < len(text) <= 20 and text.isdigit() and text.isascii():
        return int(text)
    return None


def small_number(value: str, suffix: str = "") -> int | None:
    """``"16x"`` -> 16, ``"97 %"`` -> 97 (suffix ``x`` / ``%``); None for anything else.

    At most 3 digits: link generations, lane counts and percentages are small,
    and a long run of digits is not converted.
    """
    text = value.strip()
    if suffix:
        text = text.removesuffix(suffix).rstrip()
    if 0 < len(text) <= 3 and text.isdigit() and text.isascii():
        return int(text)
    return None


class LostGpu:
    """A GPU nvidia-smi could not get a handle for."""

    def __init__(self, why: str, index: int | None = None) -> None:
        """``index``: the NVML index the line names (drivers 580 and later print it)."""
        self.why = why
        self.index = index


class SmiReport:
    """What ``nvidia-smi -q`` printed."""

    def __init__(self) -> None:
        """Empty report, filled by :func:`parse_query`."""
        self.attached: int | None = None
        self.gpus: list[GpuRecord] = []
        self.lost: dict[str, LostGpu] = {}  # bus -> why it is lost
        self.lost_unplaced: list[LostGpu] = []  # lost GPUs printed without a bus
        self.no_devices = False
        self.no_driver: str | None = None


def parse_query(text: str) -> SmiReport:
    """Parse ``nvidia-smi -q`` output (unknown lines are ignored).

    Substring tests come before any regex: an 8-GPU report has thousands of lines.
    """
    report = SmiReport()
    current: GpuRecord | None = None
    section = ""
    # A header line deeper than a section ("GPU Link Info", "PCIe Generation",
    # "Link Width" under "PCI"), and its indent: it ends at the next line as shallow.
    subsection, sub_indent = "", 0
    # Under "ECC Errors": "Volatile" or "Aggregate", which a deeper header ("Single
    # Bit" on drivers before Ampere) does not end.
    ecc_scope = ""
    for line in text.splitlines():
        if line.startswith("GPU ") and (header := _HEADER.match(line)):
            current = GpuRecord(bus=normalize_bus(header.group(1)))
            report.gpus.append(current)
            section, subsection, ecc_scope = "", "", ""
            continue
        if "device handle" in line and (lost := _LOST.search(line)):
            index = int(lost["index"]) if lost["index"] is not None else None
            gone = LostGpu(lost["why"].strip() or "device handle lost", index)
            if lost["bus"] is not None:
                report.lost[normalize_bus(lost["bus"])] = gone
            else:
                report.lost_unplaced.append(gone)
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
            if stripped:
                indent = len(line) - len(line.lstrip())
                if indent <= 4:
                    section, subsection, ecc_scope = stripped, "", ""  # "    Remapped Rows"
                else:
                    subsection, sub_indent = stripped, indent  # "            Link Width"
                    if section == "ECC Errors" and indent <= 8:
                        ecc_scope = stripped  # "        Volatile"
            continue
        indent = len(key) - len(key.lstrip())
        key, value = key.strip(), value.strip()
        if key == "Attached GPUs" and value.isdigit():
            report.attached = int(value)
        if current is None:
            continue
        if indent <= 4:
            section, subsection, ecc_scope = "", "", ""
        elif subsection and indent <= sub_indent:
            subsection = ""
        if section in CLOCK_EVENT_SECTIONS:
            if key in CLOCK_EVENT_KEYS:
                current.clock_events[CLOCK_EVENT_KEYS[key]] = value.lower() == "active"
        elif section == "PCI" and subsection in _LINK_SUBSECTIONS and key in ("Max", "Current"):
            _link_value(current, _LINK_SUBSECTIONS[subsection], key, value)
        elif key == "Performance State" and indent <= 4:
            current.performance_state = value[:8] or None
        elif section == "Utilization" and key == "Gpu":
            current.utilization_gpu = small_number(value, "%")
        elif key == "GPU Recovery Action":
            current.recovery_action = value
        elif section == "Remapped Rows" and key == "Pending":
            current.remap_pending = value
        elif section == "Remapped Rows" and key == "Remapping Failure Occurred":
            current.remap_failure = value
        elif section == "Retired Pages" and key in _PENDING_RETIREMENT_KEYS:
            current.page_retirement_pending = value
        elif section == "GPU Reset Status" and key in _RESET_STATUS_ACTIONS:
            current.reset_status[key] = value
        elif section == "ECC Errors":
            _ecc_value(current, ecc_scope, subsection, key, value)
    return report


_CORRECTABLE_KEYS = frozenset({"SRAM Correctable", "DRAM Correctable"})


def _ecc_value(gpu: GpuRecord, scope: str, subsection: str, key: str, value: str) -> None:
    # Only what the driver counted since it loaded: Aggregate is the GPU's lifetime.
    if scope != "Volatile":
        return
    if key in _CORRECTABLE_KEYS or (subsection == "Single Bit" and key == "Total"):
        gpu.ecc_correctable_parts.append(counter_number(value))


def _link_value(gpu: GpuRecord, link: str, key: str, value: str) -> None:
    number = small_number(value, "x" if link == "width" else "")
    if link == "gen":
        if key == "Max":
            gpu.pcie_gen_max = number
        else:
            gpu.pcie_gen_current = number
    elif key == "Max":
        gpu.link_width_max = number
    else:
        gpu.link_width_current = number


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


_RESET_SOURCE = "nvidia-smi GPU Reset Status"


def _reset_status_action(status: dict[str, str]) -> int | None:
    """The recovery action ``GPU Reset Status`` stands for: 4, 1, 0 (all "No") or None (unread)."""
    values = {key: value.strip().lower() for key, value in status.items()}
    for key, action in _RESET_STATUS_ACTIONS.items():  # drain and reset first
        if values.get(key) == "yes":
            return action
    return 0 if "no" in values.values() else None


def _place_unplaced(report: SmiReport, saved_buses: dict[str, int]) -> None:
    """Give a lost GPU printed with an index but no bus the bus the last complete run saw there."""
    by_index = {i: bus for bus, i in saved_buses.items() if isinstance(i, int)}
    shown = {g.bus for g in report.gpus} | set(report.lost)
    unplaced = []
    for gone in report.lost_unplaced:
        bus = by_index.get(gone.index) if gone.index is not None else None
        if bus is not None and bus not in shown:
            report.lost[bus] = gone
            shown.add(bus)
        else:
            unplaced.append(gone)
    report.lost_unplaced = unplaced


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
    if not report.gpus and not report.lost and not report.lost_unplaced and not report.no_devices:
        reason = result.describe() if result.status == "failed" else "output lists no GPU"
        return SmiOutcome(unknown=f"GPU state unknown: nvidia-smi -q {reason}")
    expected, expected_from = config.expected_gpu_count()
    if report.no_devices and expected is None:
        return SmiOutcome(
            unknown=f"nvidia-smi found no GPU and no GPU count is expected ({expected_from})"
        )

    _place_unplaced(report, saved_buses)
    present = sorted({g.bus for g in report.gpus} | set(report.lost))
    count = len(present) + len(report.lost_unplaced)
    # The header counts GPUs the output never shows: it was cut short. The header
    # must not stand in for the GPUs it lost; what the shown GPUs say still counts.
    cut_short = report.attached is not None and report.attached > count
    short = not cut_short and expected is not None and count < expected
    # NVML numbers GPUs in bus order; with a GPU gone, today's order would shift
    # the others, so the map saved from a complete run is used instead.
    current = {bus: index for index, bus in enumerate(present)}
    complete = not (short or cut_short or report.lost_unplaced)
    buses = current if complete or not saved_buses else saved_buses
    outcome = SmiOutcome(buses=current if complete else None)
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
    for bus, gone in sorted(report.lost.items()):
        outcome.problems.append(
            problem(
                kind="dcgm",
                error_id=120,
                # The index the line prints (580) is NVML's own; else bus order.
                gpu_index=gone.index if gone.index is not None else buses.get(bus),
                pci_bus=bus,
                test="nvidia-smi",
                text=f"GPU {bus} lost: {gone.why}"[:300],
            )
        )
    for gone in report.lost_unplaced:
        name = f"GPU{gone.index}" if gone.index is not None else "a GPU"
        outcome.problems.append(
            problem(
                kind="dcgm",
                error_id=120,
                gpu_index=gone.index,
                test="nvidia-smi",
                text=f"{name} lost (no bus printed): {gone.why}"[:300],
            )
        )
    for gpu in report.gpus:
        index = buses.get(gpu.bus)
        action_word = (gpu.recovery_action or "").strip()
        printed = bool(action_word) and action_word.lower() not in _NOT_SUPPORTED
        recovery: int | None = None  # None: not printed, not supported or unrecognised
        if printed:
            recovery = _recovery_number(action_word)
            if recovery is None:
                text = (
                    f"GPU {index} ({gpu.bus}) reports unrecognised recovery action {action_word!r}"
                )
                outcome.problems.append(problem(kind="note", text=text[:300]))
        reset = _reset_status_action(gpu.reset_status)
        # The recovery action decides when it asks for something; a driver before
        # 550 prints only GPU Reset Status, and where both are printed a "Yes"
        # there still counts when the recovery action asks for nothing.
        action, source = (recovery, "nvidia-smi") if recovery else (reset, _RESET_SOURCE)
        if action:
            outcome.problems.append(
                problem(
                    kind="xid",
                    xid=154,
                    gpu_index=index,
                    pci_bus=gpu.bus,
                    recovery_action=action,
                    text=source,
                )
            )
        elif index is not None and (recovery == 0 or (not printed and reset == 0)):
            outcome.recovery_none.add(index)
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
