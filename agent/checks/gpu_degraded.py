"""``gpu-degraded``: GPUs that work, slowly (issue 37, "slow, not dead"), from ``nvidia-smi -q``.

A degraded GPU answers every health check and still slows the whole job it is
part of. This check reports it as its own NPD condition (``GpuDegraded``), apart
from faults (``GpuHealthProblem``), so a policy can treat it apart. It reuses the
``nvidia-smi -q`` parser (agent/checks/nvidia_smi.py); per GPU it judges
(docs/tool-outputs.md names the real output each rule was checked against):

* ``pcie_width``: ``GPU Link Info / Link Width`` ``Current`` below ``Max`` (or below
  ``degraded_pcie_expected_width``): the link trained on fewer lanes, the classic
  downtrain. Judged in P0 only: DCGM reads a GPU's link generation and width
  only when the GPU is in P0 ("so that it's even valid to check PCI version",
  ``bg_check_pci_link`` in nvvs/plugin_src/pcie/PcieMain.cpp), and NVIDIA
  documents that the current generation and width "may be reduced when the GPU
  is not in use" (nvidia-smi ``pcie.link.width.current``). The width is not
  gated on utilization as well: the real captures of idle GPUs whose generation
  dropped (RTX 4090, Titan V at P8) kept their full width, and an idle node with
  a narrow link is worth knowing before a job lands on it.
* ``pcie_gen``: ``PCIe Generation`` ``Current`` below ``Max`` (or below
  ``degraded_pcie_expected_gen``), judged only in P0 *and* with ``Utilization /
  Gpu`` at or above ``degraded_pcie_gen_min_utilization``: an idle GPU lowers its
  link generation to save power (real captures: RTX 4090 and Titan V at P8 run
  generation 1 of 4 and 3), which is not a finding.
* ``clock_event:<reason>``: a clock-event reason (``Clocks Event Reasons``,
  drivers 535 and later; ``Clocks Throttle Reasons`` before) printed ``Active``.
  On by default: HW Slowdown, HW Thermal Slowdown, HW Power Brake Slowdown (the
  hardware cutting the clocks by half or more: heat, the power supply's brake
  signal, power draw; gpud's hw-slowdown component) and SW Thermal Slowdown.
  SW Power Cap (the GPU keeping to its power limit) is normal and off by
  default, as are Sync Boost and the clock settings. Not gated on load: the
  real H100 captures show HW Slowdown and HW Power Brake Slowdown Active on
  idle GPUs.

* ``ecc_correctable``: the GPU's volatile corrected ECC errors (``ECC Errors /
  Volatile``: ``SRAM Correctable`` plus ``DRAM Correctable`` on Turing and later,
  ``Single Bit / Total`` before) rising at ``degraded_ecc_correctable_per_minute``
  or more, a rate over the readings of the last ``degraded_window`` seconds once
  they span ``degraded_counter_min_span``. Memory that keeps correcting works, but
  each correction costs, and a rising count is the row that will fail next; the
  aggregate (lifetime) counts are never read (real captures show thousands
  aggregate with the volatile count at 0). The volatile count restarts at a driver
  reload (without persistence mode, at every application): a count that went
  down starts a new baseline. The threshold is an assumption (agent/config.py).

Persistence: NVML says HW Slowdown "may be also reported during PState or clock
change", and a link may be read while the GPU changes P-state, so one cycle's
reading is never a finding. A signal is reported once it was degraded in
``degraded_pcie_cycles`` / ``degraded_clock_event_cycles`` consecutive readings
that fall within ``degraded_window`` seconds; a healthy reading ends the streak
(and the finding: the condition clears); a cycle that cannot judge the signal
(not in P0, idle, value not printed, nvidia-smi not answering) neither extends
nor ends it, and a streak not extended within the window is forgotten. The
streaks live in the check's state file; a reboot forgets them (links retrain).
gpud's hw-slowdown component counts events in 6 of the last 10 minutes; this
check asks for consecutive readings instead, so a reason that flickers is not
reported.

GPU indices are NVML's (bus order), as in the ``gpu`` check.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

from agent.checks.nvidia_smi import GpuRecord, SmiReport, parse_query
from agent.checks.nvlink import LinkStatus, parse_errors, parse_status
from agent.checks.streaks import (
    Streak,
    counter_readings,
    extend_counter,
    per_minute,
    streak_from,
)
from agent.config import (
    CLOCK_EVENT_PREFIX,
    ECC_CORRECTABLE,
    NVLINK_DOWN,
    NVLINK_ERRORS_PREFIX,
    AgentConfig,
)
from agent.findings import Problem
from agent.runner import ToolResult, head

SOURCE = "nvidia-smi"
WIDTH = "pcie_width"
GEN = "pcie_gen"
ACTIVE, NOT_ACTIVE = "Active", "Not Active"
# At most this many streaks are read back from the state file (64 GPUs, every signal).
MAX_STREAKS = 64 * 10
MAX_GPUS = 64
MAX_SAMPLES = 128
_MAX_WORD = 16


class Reading(NamedTuple):
    """One signal of one GPU in one cycle."""

    what: str  # pcie_width, pcie_gen, clock_event:<reason>
    degraded: bool | None  # None: not judged this cycle
    observed: str = ""
    expected: str = ""


def readings(gpu: GpuRecord, config: AgentConfig) -> list[Reading]:
    """What this cycle's output says of each enabled signal of ``gpu``."""
    enabled = set(config.degraded_checks)
    found: list[Reading] = []
    in_p0 = (gpu.performance_state or "").upper() == "P0"
    if WIDTH in enabled:
        expected = config.degraded_pcie_expected_width or gpu.link_width_max
        current = gpu.link_width_current
        if in_p0 and expected and current:
            found.append(Reading(WIDTH, current < expected, f"{current}x", f"{expected}x"))
        else:
            found.append(Reading(WIDTH, None))
    if GEN in enabled:
        expected = config.degraded_pcie_expected_gen or gpu.pcie_gen_max
        current = gpu.pcie_gen_current
        busy = (
            gpu.utilization_gpu is not None
            and gpu.utilization_gpu >= config.degraded_pcie_gen_min_utilization
        )
        if in_p0 and busy and expected and current:
            found.append(Reading(GEN, current < expected, f"Gen{current}", f"Gen{expected}"))
        else:
            found.append(Reading(GEN, None))
    for what in dict.fromkeys(config.degraded_checks):  # a name listed twice counts once
        if not what.startswith(CLOCK_EVENT_PREFIX):
            continue
        active = gpu.clock_events.get(what.removeprefix(CLOCK_EVENT_PREFIX))
        if active is None:
            found.append(Reading(what, None))  # this driver does not print the reason
        else:
            found.append(Reading(what, active, ACTIVE if active else NOT_ACTIVE, NOT_ACTIVE))
    return found


def counter_reading(
    what: str,
    bus: str,
    key: str,
    value: int,
    threshold: int,
    readings: tuple[dict[str, list[tuple[float, int]]], dict[str, list[tuple[float, int]]]],
    now: float,
    config: AgentConfig,
    out: DegradedOutcome,
) -> Reading:
    """A cumulative counter's reading: its rate over the window against ``threshold`` a minute.

    ``readings`` is (what the state file held, what it will hold); ``key`` names the
    counter in both, ``bus`` its GPU in the log. A count that went down starts a new
    baseline; a rate is judged once the readings span ``degraded_counter_min_span``.
    """
    saved, kept = readings
    history, reset_from = extend_counter(
        saved.get(key, []), value, now, config.degraded_window, MAX_SAMPLES
    )
    if reset_from is not None:
        out.log.append(f"GPU {bus} {what} went down ({reset_from} -> {value}): new baseline")
    kept[key] = history
    rate, rise, span = per_minute(history)
    if span < config.degraded_counter_min_span:
        return Reading(what, None)
    if rate >= threshold:
        out.log.append(f"GPU {bus} {what}: +{rise} in {span:.0f} s ({rate:.1f}/min)")
    return Reading(what, rate >= threshold, f"{threshold}+/min", f"under {threshold}/min")


def ecc_reading(
    gpu: GpuRecord,
    config: AgentConfig,
    saved: dict[str, list[tuple[float, int]]],
    now: float,
    out: DegradedOutcome,
) -> Reading:
    """This cycle's corrected-ECC reading of ``gpu``, its rate over the window judged.

    The volatile count restarts when the driver reloads (without persistence mode,
    at every application: nvidia-smi's documentation), which starts a new baseline.
    """
    value = gpu.ecc_volatile_correctable
    if value is None:  # ECC off, or this driver prints N/A
        return Reading(ECC_CORRECTABLE, None)
    threshold = config.degraded_ecc_correctable_per_minute
    return counter_reading(
        ECC_CORRECTABLE, gpu.bus, gpu.bus, value, threshold, (saved, out.ecc), now, config, out
    )


def load_nvlink_up(saved: Any) -> dict[str, list[int]]:
    """Links seen active this boot (bus -> link numbers); damaged entries dropped."""
    if not isinstance(saved, dict):
        return {}
    return {
        bus: sorted({n for n in links[:64] if isinstance(n, int) and 0 <= n < 64})
        for bus, links in list(saved.items())[:MAX_GPUS]
        if isinstance(bus, str) and len(bus) <= 16 and isinstance(links, list)
    }


def nvlink_down_reading(
    bus: str, status: LinkStatus, config: AgentConfig, out: DegradedOutcome
) -> Reading:
    """Links down that were up this boot, or fewer up than expected."""
    seen = set(out.nvlink_up.get(bus, [])) | set(status.up)
    out.nvlink_up[bus] = sorted(seen)
    up = set() if status.all_down else set(status.up)
    lost = seen - up
    expected = config.degraded_nvlink_expected_links
    if expected is not None:
        total = max(expected, len(seen))
        return Reading(NVLINK_DOWN, len(up) < expected, f"{len(up)} of {total} up", "all up")
    if not seen:
        return Reading(NVLINK_DOWN, None)  # never up this boot: nothing to compare with
    return Reading(NVLINK_DOWN, bool(lost), f"{len(seen) - len(lost)} of {len(seen)} up", "all up")


def nvlink_error_readings(
    bus: str,
    totals: dict[str, int],
    config: AgentConfig,
    saved: dict[str, list[tuple[float, int]]],
    now: float,
    out: DegradedOutcome,
) -> list[Reading]:
    """Each enabled NVLink error counter of one GPU, its rate over the window judged."""
    found = []
    for kind, threshold in sorted(config.degraded_nvlink_error_thresholds.items()):
        what = NVLINK_ERRORS_PREFIX + kind
        if what not in config.degraded_checks or threshold <= 0 or kind not in totals:
            continue
        key = f"{bus} {kind}"
        readings = (saved, out.nvlink_errors)
        found.append(
            counter_reading(what, bus, key, totals[kind], threshold, readings, now, config, out)
        )
    return found


def cycles_needed(what: str, config: AgentConfig) -> int:
    """How many consecutive degraded readings make ``what`` a finding."""
    if what == ECC_CORRECTABLE or what.startswith(NVLINK_ERRORS_PREFIX):
        return 1  # a rate over the window already
    if what.startswith(CLOCK_EVENT_PREFIX):
        return config.degraded_clock_event_cycles
    return config.degraded_pcie_cycles


def load_streaks(saved: Any, config: AgentConfig) -> dict[str, Streak]:
    """The streaks of the state file (``"<bus> <what>"`` -> streak); damaged entries are dropped."""
    if not isinstance(saved, dict):
        return {}
    enabled = set(config.degraded_checks)
    streaks: dict[str, Streak] = {}
    for key, entry in list(saved.items())[:MAX_STREAKS]:
        if not isinstance(key, str) or len(key) > 80:
            continue
        what = key.partition(" ")[2]
        if what not in enabled:
            continue
        streak = streak_from(entry, cycles_needed(what, config), _MAX_WORD)
        if streak is not None:
            streaks[key] = streak
    return streaks


class DegradedOutcome:
    """What the check concluded, and the state to keep for the next cycle."""

    def __init__(self) -> None:
        """Nothing found yet."""
        self.problems: list[Problem] = []
        self.unknowns: list[str] = []
        self.log: list[str] = []
        self.detail = ""
        self.streaks: dict[str, Streak] = {}
        self.buses: dict[str, int] = {}
        self.ecc: dict[str, list[tuple[float, int]]] = {}
        self.nvlink_errors: dict[str, list[tuple[float, int]]] = {}  # "<bus> <kind>"
        self.nvlink_up: dict[str, list[int]] = {}  # bus -> links seen active this boot

    def state(self) -> dict[str, Any]:
        """What the state file keeps: streaks, the bus -> index map, counter readings."""
        return {
            "streaks": {key: streak.to_json() for key, streak in self.streaks.items()},
            "gpu_buses": self.buses,
            "ecc": {bus: [[t, v] for t, v in pairs] for bus, pairs in self.ecc.items()},
            "nvlink_errors": {
                key: [[t, v] for t, v in pairs] for key, pairs in self.nvlink_errors.items()
            },
            "nvlink_up": self.nvlink_up,
        }


def _indices(
    report: SmiReport, config: AgentConfig, saved: dict[str, int]
) -> tuple[dict[str, int], bool]:
    """Bus -> NVML index, and whether this output showed every GPU (its map is worth keeping).

    As the ``gpu`` check: with a GPU missing, today's bus order would shift the
    others, so the map of the last complete output is used.
    """
    present = sorted({g.bus for g in report.gpus} | set(report.lost))
    count = len(present) + len(report.lost_unplaced)
    expected, _ = config.expected_gpu_count()
    complete = (
        (report.attached is None or report.attached <= count)
        and not report.lost_unplaced
        and (expected is None or count >= expected)
    )
    current = {bus: index for index, bus in enumerate(present)}
    return (current if complete or not saved else saved), complete


def evaluate(
    result: ToolResult,
    config: AgentConfig,
    saved: dict[str, Any],
    now: float | None = None,
    nvlink_status: ToolResult | None = None,
    nvlink_errors: ToolResult | None = None,
) -> DegradedOutcome:
    """Read one ``nvidia-smi -q`` run into findings, carrying the streaks of earlier cycles.

    Args:
        result: The ``-q`` run.
        config: Which signals, how many cycles, the window, the expected link.
        saved: The state of the last cycle of this boot (``{}`` for none).
        now: Wall-clock time of the reading (state survives the process).
        nvlink_status: The ``nvlink -s`` run, if the NVLink signals are on.
        nvlink_errors: The ``nvlink -e`` run, if the NVLink signals are on.
    """
    now = time.time() if now is None else now
    outcome = DegradedOutcome()
    streaks = load_streaks(saved.get("streaks"), config)
    ecc = (
        counter_readings(saved.get("ecc"), MAX_GPUS, 16, MAX_SAMPLES)  # bus
        if ECC_CORRECTABLE in config.degraded_checks
        else {}
    )
    outcome.ecc = dict(ecc)  # a GPU not read this cycle keeps its readings
    # Keyed "<bus> <kind>": three error kinds per GPU.
    link_counters = counter_readings(saved.get("nvlink_errors"), MAX_GPUS * 3, 32, MAX_SAMPLES)
    outcome.nvlink_errors = dict(link_counters)
    outcome.nvlink_up = load_nvlink_up(saved.get("nvlink_up"))
    statuses = _nvlink_output(nvlink_status, parse_status, "nvlink -s", outcome)
    errors = _nvlink_output(nvlink_errors, parse_errors, "nvlink -e", outcome)
    saved_buses = saved.get("gpu_buses")
    buses: dict[str, int] = (
        {
            b: i
            for b, i in list(saved_buses.items())[:64]
            if isinstance(b, str) and isinstance(i, int) and not isinstance(i, bool)
        }
        if isinstance(saved_buses, dict)
        else {}
    )
    report: SmiReport | None = None
    if result.status in ("hung", "missing", "error"):
        outcome.unknowns.append(f"GPU degradation unknown: {result.describe()}")
    else:
        text = head(result.stdout).decode("utf-8", "replace")
        report = parse_query(text + "\n" + head(result.stderr).decode("utf-8", "replace"))
        if report.no_driver:
            outcome.unknowns.append(
                "GPU degradation unknown: nvidia-smi cannot reach the NVIDIA driver"
            )
            report = None
        elif not report.gpus:
            reason = result.describe() if result.status == "failed" else "lists no GPU"
            outcome.unknowns.append(f"GPU degradation unknown: nvidia-smi -q {reason}")
            report = None
    judged = {WIDTH: 0, GEN: 0}
    keep = buses  # the map saved for the next cycle: the last complete output's
    if report is not None:
        buses, complete = _indices(report, config, buses)
        keep = buses if complete else keep
        count = len({g.bus for g in report.gpus} | set(report.lost)) + len(report.lost_unplaced)
        if report.attached is not None and report.attached > count:
            outcome.unknowns.append(
                "GPU degradation unknown for the GPUs not shown: nvidia-smi -q output cut"
                f" short ({report.attached} attached, {count} shown)"
            )
        for gpu in report.gpus:
            found = readings(gpu, config)
            if ECC_CORRECTABLE in config.degraded_checks:
                found.append(ecc_reading(gpu, config, ecc, now, outcome))
            index = buses.get(gpu.bus)
            if NVLINK_DOWN in config.degraded_checks and index in statuses:
                found.append(nvlink_down_reading(gpu.bus, statuses[index], config, outcome))
            if index in errors:
                found.extend(
                    nvlink_error_readings(
                        gpu.bus, errors[index], config, link_counters, now, outcome
                    )
                )
            for reading in found:
                key = f"{gpu.bus} {reading.what}"
                if reading.what in judged and reading.degraded is not None:
                    judged[reading.what] += 1
                if reading.degraded is None:
                    continue  # not judged: the streak neither grows nor ends
                if not reading.degraded:
                    if key in streaks:
                        outcome.log.append(
                            f"{_where(gpu.bus, buses)} {reading.what}: back to normal"
                        )
                    streaks.pop(key, None)
                    continue
                need = cycles_needed(reading.what, config)
                streak = streaks.get(key)
                times = [*(streak.times if streak else []), now][-need:]
                streaks[key] = Streak(times, reading.observed, reading.expected)
        outcome.detail = (
            f"{len(report.gpus)} GPU(s) read; PCIe width judged on {judged[WIDTH]} (P0),"
            f" generation on {judged[GEN]} (P0, busy)"
        )
    outcome.buses = keep
    for key, streak in list(streaks.items()):
        if now - streak.times[-1] > config.degraded_window:
            del streaks[key]  # not seen degraded within the window: forgotten
    outcome.streaks = streaks
    for key, streak in sorted(streaks.items(), key=lambda item: _order(item[0], buses)):
        bus, _, what = key.partition(" ")
        need = cycles_needed(what, config)
        times = streak.times[-need:]
        if len(times) < need or times[-1] - times[0] > config.degraded_window:
            outcome.log.append(
                f"{_where(bus, buses)} {what}: {streak.observed}, expected {streak.expected}"
                f" ({len(times)} of {need} cycles)"
            )
            continue
        outcome.problems.append(
            Problem(
                kind="degraded",
                source=SOURCE,
                gpu_index=buses.get(bus),
                pci_bus=bus,
                what=what,
                observed=streak.observed,
                expected=streak.expected,
                text=(
                    f"over {config.degraded_counter_min_span:g}+ s"
                    if what == ECC_CORRECTABLE
                    else f"{need}+ cycles"
                ),
                observed_at=now,
            )
        )
    if not outcome.detail:
        outcome.detail = "nvidia-smi not read"
    return outcome


def _nvlink_output(
    result: ToolResult | None, parse: Any, what: str, out: DegradedOutcome
) -> dict[int, Any]:
    """One ``nvidia-smi nvlink`` run parsed per GPU index; {} (and a log line) if unread."""
    if result is None:
        return {}
    if result.status != "ok":
        out.log.append(f"nvidia-smi {what} not read: {result.describe()}; NVLink not judged")
        return {}
    parsed: dict[int, Any] = parse(head(result.stdout).decode("utf-8", "replace"))
    return parsed


def _where(bus: str, buses: dict[str, int]) -> str:
    index = buses.get(bus)
    return f"GPU {index} ({bus})" if index is not None else f"GPU {bus}"


def _order(key: str, buses: dict[str, int]) -> tuple[int, str]:
    bus, _, what = key.partition(" ")
    return buses.get(bus, 1 << 10), f"{bus} {what}"
