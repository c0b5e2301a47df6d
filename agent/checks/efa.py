"""EFA (AWS Elastic Fabric Adapter): devices, provider, links, and error counters.

Read from sysfs (what ``lspci`` and ``rdma link`` read) plus ``fi_info -p efa``:

* device count: EFA PCI functions (vendor 0x1d0f, device 0xefa0-0xefa3)
  against the instance type's count, and every one registered with the RDMA
  stack (``/sys/class/infiniband``);
* provider: the ``efa`` kernel module is loaded and libfabric lists the provider;
* link: every port ``ACTIVE`` and ``LinkUp``;
* counters (a separate, event-only check): error counters under
  ``ports/<p>/hw_counters`` that rose by at least their threshold since the last run.

Wrong counts and a missing provider mean replacement, a link down means
diagnosis (catalog.EFA_CHECKS); counter bursts are warnings.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import NamedTuple

from agent.config import AgentConfig
from agent.findings import Problem
from agent.runner import run

SOURCE = "efa-check"
EFA_VENDOR = "0x1d0f"
EFA_DEVICE_IDS = frozenset({"0xefa0", "0xefa1", "0xefa2", "0xefa3"})


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None


def efa_pci_functions(sysfs: str) -> list[str]:
    """PCI addresses of EFA functions (what ``lspci -d 1d0f:`` would list as EFA)."""
    root = Path(sysfs) / "bus" / "pci" / "devices"
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    found = []
    for name in names:
        if _read(root / name / "vendor") == EFA_VENDOR and _read(root / name / "device") in (
            EFA_DEVICE_IDS
        ):
            found.append(name)
    return found


class Port(NamedTuple):
    """One RDMA port of an EFA device."""

    device: str
    port: str
    state: str
    physical_state: str

    @property
    def name(self) -> str:
        """``rdmap79s0/1``."""
        return f"{self.device}/{self.port}"


def efa_ports(sysfs: str) -> list[Port]:
    """Ports of the EFA devices registered under ``/sys/class/infiniband``."""
    root = Path(sysfs) / "class" / "infiniband"
    try:
        devices = sorted(os.listdir(root))
    except OSError:
        return []
    ports = []
    for device in devices:
        vendor = _read(root / device / "device" / "vendor")
        if vendor is not None and vendor != EFA_VENDOR:
            continue  # another RDMA device (e.g. a Mellanox NIC): not ours to judge
        try:
            numbers = sorted(os.listdir(root / device / "ports"))
        except OSError:
            ports.append(Port(device, "-", "no ports", "unknown"))
            continue
        for number in numbers:
            base = root / device / "ports" / number
            state = _read(base / "state") or "unknown"
            physical = _read(base / "phys_state") or "unknown"
            ports.append(Port(device, number, state, physical))
    return ports


def _word(value: str) -> str:
    """``"4: ACTIVE"`` -> ``"ACTIVE"``."""
    return value.split(":", 1)[-1].strip()


class EfaOutcome:
    """What an EFA check concluded."""

    def __init__(self) -> None:
        """Start with nothing found."""
        self.problems: list[Problem] = []
        self.unknowns: list[str] = []
        self.detail = ""


def check_efa(config: AgentConfig, deadline: float) -> EfaOutcome:
    """Device count, registration, kernel module, libfabric provider and link state."""
    outcome = EfaOutcome()
    now = time.time()
    expected, expected_from = config.expected_efa_count()
    functions = efa_pci_functions(config.sysfs_root)
    if not functions and not expected:
        outcome.detail = f"no EFA devices, none expected ({expected_from})"
        return outcome

    def problem(check: str, text: str, device: str | None = None) -> None:
        outcome.problems.append(
            Problem(
                kind="efa",
                source=SOURCE,
                efa_check=check,
                device=device,
                text=text,
                observed_at=now,
            )
        )

    if expected is not None and len(functions) != expected:
        problem(
            "device_count", f"{len(functions)} EFA devices, expected {expected} ({expected_from})"
        )
    ports = efa_ports(config.sysfs_root)
    registered = {p.device for p in ports}
    if functions and len(registered) < len(functions):
        problem(
            "device_count",
            f"{len(registered)} of {len(functions)} EFA devices registered with the RDMA stack",
        )
    if not (Path(config.sysfs_root) / "module" / "efa").exists():
        problem("provider", "efa kernel module not loaded")
    timeout = max(0.1, min(config.fi_info_timeout, deadline - time.monotonic()))
    result = run([config.fi_info, "-p", "efa"], timeout)
    if result.status in ("hung", "missing", "error"):
        outcome.unknowns.append(f"EFA provider unknown: {result.describe()}")
    elif result.status == "failed" or b"provider: efa" not in result.stdout:
        problem("provider", f"fi_info -p efa lists no efa provider ({result.describe()})")
    for port in ports:
        state, physical = _word(port.state), _word(port.physical_state)
        if state.upper() != "ACTIVE" or physical.replace(" ", "").lower() != "linkup":
            problem("link", f"state {state}, physical state {physical}", port.name)
    outcome.detail = f"{len(functions)} EFA devices, {len(ports)} ports"
    return outcome


# -------------------------------------------------------------------- counters


def read_counters(config: AgentConfig) -> dict[str, int]:
    """``<device>/<port>/<counter>`` -> value for the configured counters."""
    values: dict[str, int] = {}
    for port in efa_ports(config.sysfs_root):
        base = Path(config.sysfs_root) / "class" / "infiniband" / port.device / "ports" / port.port
        for counter in config.efa_counter_thresholds:
            raw = _read(base / "hw_counters" / counter)
            if raw is not None and raw.isdigit():
                values[f"{port.name}/{counter}"] = int(raw)
    return values


def check_counters(
    config: AgentConfig, saved: dict[str, int] | None
) -> tuple[EfaOutcome, dict[str, int]]:
    """Counters that rose by at least their threshold since ``saved``; the values to save.

    With no saved values (first run, reboot) this run only records a baseline.
    A counter that went down (driver reload) starts a new baseline.
    """
    outcome = EfaOutcome()
    values = read_counters(config)
    if saved is None:
        outcome.detail = f"baseline of {len(values)} EFA counters recorded"
        return outcome, values
    now = time.time()
    bursts: dict[str, list[str]] = {}
    for key, value in values.items():
        device, _, counter = key.rpartition("/")
        before = saved.get(key)
        if before is None or value < before:
            continue
        if value - before >= max(1, config.efa_counter_thresholds.get(counter, 1)):
            bursts.setdefault(device, []).append(f"{counter} +{value - before}")
    for device, rises in sorted(bursts.items()):
        outcome.problems.append(
            Problem(
                kind="efa",
                source=SOURCE,
                efa_check="counters",
                device=device,
                text=", ".join(rises),
                observed_at=now,
            )
        )
    outcome.detail = f"{len(values)} EFA counters, no burst" if not bursts else ""
    return outcome, values
