"""One check cycle: run the checks, merge with the saved state, decide exit code and message.

``gpu``: ``dcgmi health`` and ``nvidia-smi -q`` run concurrently, each with
its own timeout, while the kernel log is scanned for new Xid lines. The
kernel log is read every cycle (it is the only place Xid events appear), and
when the tools hang or fail it is what still names the fault: a hang is
reported as a hang, within its timeout, next to whatever the log shows.

``gpu-degraded``: GPUs that work, slowly (a downtrained PCIe link, clocks cut
by a hardware or thermal slowdown), from ``nvidia-smi -q``; its own condition
(``GpuDegraded``), reported only once a signal persisted for some cycles
(agent/checks/gpu_degraded.py).

``efa``: device count, provider and links. ``efa-counters``: error-counter
bursts since the last run (meant for an NPD event rule, not a condition).
``efa-degraded``: EFA ports that work, slowly (a port rate below the configured
one, error counters rising over a window); its own condition (``EfaDegraded``,
agent/checks/efa_degraded.py).
"""

from __future__ import annotations

import sys
import time
from typing import Any

from agent.checks import dcgm, nvidia_smi
from agent.config import NVLINK_DOWN, NVLINK_ERRORS_PREFIX, AgentConfig
from agent.findings import Problem, render
from agent.kernel_log import (
    KernelLogError,
    ScanOutcome,
    SxidHit,
    XidHit,
    gpu_buses_from_proc,
    scan_kernel_log,
)
from agent.runner import Background, ToolResult, run
from agent.state import StateStore, read_boot_id

CHECKS = ("gpu", "gpu-degraded", "efa", "efa-counters", "efa-degraded")
KERNEL_SOURCE = "kernel-log"


class CycleStats:
    """Numbers a benchmark or an operator may want about the cycle."""

    def __init__(self) -> None:
        """Nothing measured yet."""
        self.kernel_log_bytes = 0
        self.tools: dict[str, str] = {}


def _log(lines: list[str]) -> None:
    # NPD logs a plugin's stderr: the detail that does not fit the condition message.
    for line in lines:
        print(f"remediate-agent: {line}", file=sys.stderr)


def _remaining(deadline: float, wanted: float) -> float:
    return max(0.1, min(wanted, deadline - time.monotonic()))


def _mig(hit: XidHit) -> str | None:
    if hit.gpu_instance is None:
        return None
    ci = f" GPU-CI {hit.compute_instance}" if hit.compute_instance is not None else ""
    return f"GPU-I {hit.gpu_instance}{ci}"


_RESET_FLAGS = (("D-RST: Yes", 4), ("RST: Yes", 1))


def _recovery_action(hit: XidHit) -> int | None:
    from gpu_remediation.catalog import recovery_action_from_message

    if hit.xid == 154:
        return recovery_action_from_message(hit.tail)
    # Xid 94/95 lines say whether the driver wants a reset ("RST: Yes") or a drain
    # and reset ("D-RST: Yes"): the same actions NVML reports (catalog.RECOVERY_ACTIONS).
    for flag, action in _RESET_FLAGS:
        if flag in hit.tail and (flag.startswith("D-") or "D-RST: Yes" not in hit.tail):
            return action
    return None


def _nvlink5_unit(tail: str) -> str:
    """``RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x...)`` -> ``RLW_RXPIPE Nonfatal``."""
    words = tail[:200].split(maxsplit=1)
    return f"{words[0][:60]} Nonfatal" if words else "Nonfatal"


def xid_problems(
    hits: list[XidHit], buses: dict[str, int], config: AgentConfig, now: float
) -> tuple[list[Problem], list[str], list[str]]:
    """One problem per (Xid, GPU) seen this cycle, in log order; lines for the log; keys cleared.

    Repeats of the same Xid on the same GPU in one cycle are one problem that
    says how many times. Xid 154 keeps the last action it reported; a change
    back to 0 (None) is not a problem and clears an Xid 154 held for that GPU.
    Informational Xids (NVIDIA: IGNORE) are only logged unless
    ``report_informational_xids``; so are NVLink5 Xids 144-150 whose every line
    this cycle the driver marks ``Nonfatal`` (NVIDIA's decode: IGNORE). When
    reported, such a problem names the unit and its severity word, which is
    what the classifier reads to keep it informational.
    """
    from gpu_remediation.catalog import nvlink5_nonfatal, xid_info
    from gpu_remediation.models import FaultClass

    groups: dict[tuple[int, str], list[XidHit]] = {}
    for hit in hits:
        groups.setdefault((hit.xid, hit.bus), []).append(hit)
    problems: list[Problem] = []
    log: list[str] = []
    cleared: list[str] = []
    for (xid, bus), group in groups.items():
        last = group[-1]
        log.append(f"Xid {xid} on {bus or 'unknown bus'} x{len(group)}: {last.tail[:200]}")
        action = _recovery_action(last)
        if xid == 154 and not action:
            back_to_none = Problem(
                kind="xid",
                source=KERNEL_SOURCE,
                xid=154,
                gpu_index=buses.get(bus),
                pci_bus=bus or None,
            )
            cleared.append(back_to_none.key)
            continue
        info = xid_info(xid)
        nonfatal = all(nvlink5_nonfatal(xid, h.tail) for h in group)
        informational = nonfatal or (
            info is not None and info.fault_class is FaultClass.INFORMATIONAL
        )
        if informational and not action and not config.report_informational_xids:
            continue
        details = [_nvlink5_unit(last.tail)] if nonfatal else []
        details += sorted({m for m in (_mig(h) for h in group) if m})
        if any(h.banner for h in group) and not any(not h.banner for h in group):
            details.append("driver banner")
        if len(group) > 1:
            details.append(f"{len(group)} times")
        problems.append(
            Problem(
                kind="xid",
                source=KERNEL_SOURCE,
                xid=xid,
                gpu_index=buses.get(bus),
                pci_bus=bus or None,
                recovery_action=action,
                text=", ".join(details),
                observed_at=now,
            )
        )
    return problems, log, cleared


def sxid_problems(hits: list[SxidHit], now: float) -> tuple[list[Problem], list[str]]:
    """Fatal NVSwitch errors as problems (notes); non-fatal ones only logged."""
    problems: list[Problem] = []
    log: list[str] = []
    for hit in hits:
        line = f"NVSwitch {hit.device} ({hit.bus}) SXid {hit.code}"
        log.append(f"{line} {'fatal' if hit.fatal else 'non-fatal'}: {hit.tail[:200]}")
        if hit.fatal:
            text = f"{line} fatal: {hit.tail[:120]}" if hit.tail else f"{line} fatal"
            problems.append(Problem(kind="note", source=KERNEL_SOURCE, text=text, observed_at=now))
    return problems, log


def _held(state: dict[str, Any], now: float) -> dict[str, dict[str, Any]]:
    held: dict[str, dict[str, Any]] = {}
    for entry in state.get("held", []):
        if not isinstance(entry, dict) or not isinstance(entry.get("until"), int | float):
            continue
        problem = Problem.from_json(entry.get("problem"))
        if problem is not None and entry["until"] > now:
            held[problem.key] = {"problem": problem, "until": entry["until"]}
    return held


def _dedupe(problems: list[Problem]) -> list[Problem]:
    seen: set[str] = set()
    kept = []
    for problem in problems:
        if problem.key not in seen:
            seen.add(problem.key)
            kept.append(problem)
    return kept


def _hang_notes(
    results: list[ToolResult], state: dict[str, Any], config: AgentConfig, now: float
) -> tuple[list[Problem], dict[str, int]]:
    counts: dict[str, int] = {}
    saved_hung = state.get("hung")
    saved: dict[str, Any] = saved_hung if isinstance(saved_hung, dict) else {}
    notes = []
    for result in results:
        before = saved.get(result.name, 0) if isinstance(saved.get(result.name), int) else 0
        counts[result.name] = before + 1 if result.status == "hung" else 0
        if counts[result.name] >= config.hang_cycles_to_problem:
            # Same words every cycle: NPD updates the condition only when the message changes.
            text = (
                f"{result.name} hangs: {config.hang_cycles_to_problem}+ cycles in a row without "
                f"an answer within {result.timeout:g} s, GPU driver may be wedged"
            )
            notes.append(Problem(kind="note", source="remediate-agent", text=text, observed_at=now))
    return notes, counts


def gpu_cycle(config: AgentConfig, stats: CycleStats) -> tuple[int, str]:
    """Run the GPU check once (see module docstring); return (exit code, message)."""
    deadline = time.monotonic() + config.deadline
    store = StateStore(config.state_path("gpu"))
    with store.locked(config.lock_timeout):
        state = store.load()
        log: list[str] = [store.corrupt_note] if store.corrupt_note else []
        unknowns: list[str] = []
        boot_id, boot_changed = _boot(state, config, log)
        if boot_changed:
            log.append("new boot: Xids of the previous boot are no longer reported")

        dcgm_run = (
            Background(dcgm.health_argv(config), _remaining(deadline, config.dcgm_timeout))
            if config.dcgm_enabled
            else None
        )
        smi_run = Background(
            [config.nvidia_smi, "-q"], _remaining(deadline, config.nvidia_smi_timeout)
        )

        saved_position = None if state.get("corrupt") else state.get("kernel_log")
        scan: ScanOutcome | None
        try:
            scan = scan_kernel_log(
                config.kernel_log_kind,
                config.kernel_log_target,
                saved_position if isinstance(saved_position, dict) else None,
                boot_changed=boot_changed,
                deadline=deadline,
                first_run_bytes=config.kernel_log_first_run_bytes,
                rotated_suffixes=config.rotated_suffixes,
                journalctl=config.journalctl,
                journal_timeout=config.journal_timeout,
            )
            stats.kernel_log_bytes = scan.bytes_read
            log += scan.notes
        except KernelLogError as err:
            scan = None
            unknowns.append(f"kernel log unreadable: {err}")

        dcgm_result = dcgm_run.result() if dcgm_run is not None else None
        smi_result = smi_run.result()
        results = [r for r in (dcgm_result, smi_result) if r is not None]
        for result in results:
            stats.tools[result.name] = result.status
        now = time.time()
        saved_buses = state.get("gpu_buses") if isinstance(state.get("gpu_buses"), dict) else {}
        smi = nvidia_smi.evaluate(smi_result, config, saved_buses or {})
        buses = smi.buses or saved_buses or gpu_buses_from_proc(config.nvidia_proc_gpus)
        dcgm_outcome = (
            dcgm.evaluate(dcgm_result, config, deadline) if dcgm_result is not None else None
        )
        for outcome in (smi, dcgm_outcome):
            if outcome is not None and outcome.unknown:
                unknowns.append(outcome.unknown)

        held = {} if boot_changed else _held(state, now)
        for index in smi.recovery_none:
            # The driver says no recovery is needed now: an Xid 154 held from an
            # earlier cycle is stale (a fresh line in this cycle still counts).
            held.pop(f"xid/154/{index}", None)
        new_events: list[Problem] = []
        if scan is not None and (scan.xids or scan.sxids):
            xids, xid_log, cleared = xid_problems(scan.xids, buses, config, now)
            sxids, sxid_log = sxid_problems(scan.sxids, now)
            new_events = xids + sxids
            log += xid_log + sxid_log
            for key in cleared:
                held.pop(key, None)
        for problem in new_events:
            held[problem.key] = {"problem": problem, "until": now + config.xid_hold}
        hang_notes, hung = _hang_notes(results, state, config, now)
        problems = _dedupe(
            [
                *smi.problems,
                *(dcgm_outcome.problems if dcgm_outcome else []),
                *(entry["problem"] for entry in held.values()),
                *hang_notes,
            ]
        )
        store.save(
            {
                "boot_id": boot_id,
                "kernel_log": scan.position if scan is not None else saved_position,
                "held": [
                    {"problem": entry["problem"].to_json(), "until": entry["until"]}
                    for entry in held.values()
                ],
                "hung": hung,
                "gpu_buses": buses,
            }
        )
    _log(log)
    ok = "; ".join(
        part
        for part in (
            smi.detail,
            dcgm_outcome.detail if dcgm_outcome else "DCGM check off",
            f"kernel log: {stats.kernel_log_bytes} new bytes, no Xid",
        )
        if part
    )
    return render(
        problems, unknowns, ok_text=f"GPU health OK: {ok}", max_bytes=config.max_output_length
    )


def _boot(state: dict[str, Any], config: AgentConfig, log: list[str]) -> tuple[str | None, bool]:
    """This boot's id (None if unreadable, noted in ``log``); whether ``state`` is another's."""
    try:
        boot_id = read_boot_id(config.boot_id_path)
    except OSError as err:
        log.append(f"boot id unreadable ({err}): reboots are not detected")
        return None, False
    return boot_id, bool(state.get("boot_id") and boot_id and state["boot_id"] != boot_id)


def _this_boots_state(
    store: StateStore, config: AgentConfig, forgotten: str
) -> tuple[dict[str, Any], str | None, list[str]]:
    """A degradation check's saved state if this boot wrote it (else empty), the boot id, notes.

    The caller holds the store's lock. ``forgotten`` says, after a reboot, what
    the last boot's state was that no longer counts.
    """
    state = store.load()
    log: list[str] = [store.corrupt_note] if store.corrupt_note else []
    boot_id, new_boot = _boot(state, config, log)
    if new_boot:
        log.append(f"new boot: {forgotten}")
    return ({} if new_boot or state.get("corrupt") else state), boot_id, log


def gpu_degraded_cycle(config: AgentConfig, stats: CycleStats) -> tuple[int, str]:
    """Read ``nvidia-smi -q`` for degradation; streaks of earlier cycles of this boot count."""
    from agent.checks import gpu_degraded

    deadline = time.monotonic() + config.deadline
    store = StateStore(config.state_path("gpu-degraded"))
    with store.locked(config.lock_timeout):
        usable, boot_id, log = _this_boots_state(
            store, config, "degradation seen before it is forgotten (links retrain)"
        )
        result = run([config.nvidia_smi, "-q"], _remaining(deadline, config.nvidia_smi_timeout))
        stats.tools[result.name] = result.status
        status = errors = None
        if any(
            name == NVLINK_DOWN or name.startswith(NVLINK_ERRORS_PREFIX)
            for name in config.degraded_checks
        ):
            # -q prints no NVLink link or counter (agent/checks/nvlink.py).
            status, errors = (
                run(
                    [config.nvidia_smi, "nvlink", flag],
                    _remaining(deadline, config.nvidia_smi_timeout),
                )
                for flag in ("-s", "-e")
            )
        outcome = gpu_degraded.evaluate(result, config, usable, time.time(), status, errors)
        store.save({"boot_id": boot_id, **outcome.state()})
    _log(log + outcome.log)
    return render(
        outcome.problems,
        outcome.unknowns,
        ok_text=f"GPU degradation OK: {outcome.detail}",
        max_bytes=config.max_output_length,
    )


def efa_cycle(config: AgentConfig, stats: CycleStats) -> tuple[int, str]:
    """Run the EFA check once: device count, provider, links."""
    from agent.checks import efa

    outcome = efa.check_efa(config, time.monotonic() + config.deadline)
    return render(
        outcome.problems,
        outcome.unknowns,
        ok_text=f"EFA OK: {outcome.detail}",
        max_bytes=config.max_output_length,
    )


def efa_counters_cycle(config: AgentConfig, stats: CycleStats) -> tuple[int, str]:
    """Compare EFA error counters with the last run (reboots start a new baseline)."""
    from agent.checks import efa

    store = StateStore(config.state_path("efa-counters"))
    with store.locked(config.lock_timeout):
        state = store.load()
        try:
            boot_id: str | None = read_boot_id(config.boot_id_path)
        except OSError:
            boot_id = None
        saved = state.get("counters")
        same_boot = state.get("boot_id") == boot_id
        usable = (
            saved if isinstance(saved, dict) and same_boot and not state.get("corrupt") else None
        )
        outcome, values = efa.check_counters(config, usable)
        store.save({"boot_id": boot_id, "counters": values})
    return render(
        outcome.problems,
        outcome.unknowns,
        ok_text=f"EFA counters OK: {outcome.detail}",
        max_bytes=config.max_output_length,
    )


def efa_degraded_cycle(config: AgentConfig, stats: CycleStats) -> tuple[int, str]:
    """Read EFA port rates and error counters; readings of earlier cycles of this boot count."""
    from agent.checks import efa_degraded

    store = StateStore(config.state_path("efa-degraded"))
    with store.locked(config.lock_timeout):
        usable, boot_id, log = _this_boots_state(
            store, config, "EFA readings of the last boot forgotten (counters restart)"
        )
        outcome = efa_degraded.evaluate(config, usable, time.time())
        store.save({"boot_id": boot_id, **outcome.state()})
    _log(log + outcome.log)
    return render(
        outcome.problems,
        outcome.unknowns,
        ok_text=f"EFA degradation OK: {outcome.detail}",
        max_bytes=config.max_output_length,
    )


CYCLES = {
    "gpu": gpu_cycle,
    "gpu-degraded": gpu_degraded_cycle,
    "efa": efa_cycle,
    "efa-counters": efa_counters_cycle,
    "efa-degraded": efa_degraded_cycle,
}
