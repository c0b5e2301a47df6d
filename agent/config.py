"""Agent settings: defaults, an optional JSON file, ``REMEDIATE_AGENT_*`` variables, CLI flags.

Node Problem Detector starts the agent every 30 seconds on every GPU node, so
the healthy path imports nothing heavy: settings are a plain class,
validated here field by field (a bad value names the field and where it came
from), not a pydantic model (importing pydantic alone costs more CPU than a
whole healthy cycle, see bench/agent.py).

Precedence: CLI flags over environment over the config file over defaults.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ENV_PREFIX = "REMEDIATE_AGENT_"

# Instance types this project knows: GPUs per node, EFA devices per node
# (reference: 32 on p5/p5e, 16 on p5en, 4 on p4d). Operators add their own
# through the config file (merged over these).
DEFAULT_GPUS_BY_INSTANCE_TYPE: dict[str, int] = {
    "p4d.24xlarge": 8,
    "p4de.24xlarge": 8,
    "p5.48xlarge": 8,
    "p5e.48xlarge": 8,
    "p5en.48xlarge": 8,
    "p6-b200.48xlarge": 8,
    "g5.48xlarge": 8,
    "g6e.48xlarge": 8,
}
DEFAULT_EFA_BY_INSTANCE_TYPE: dict[str, int] = {
    "p4d.24xlarge": 4,
    "p4de.24xlarge": 4,
    "p5.48xlarge": 32,
    "p5e.48xlarge": 32,
    "p5en.48xlarge": 16,
}
# Instance type -> the rate, Gb/s, each EFA port's sysfs ``rate`` shows on a healthy
# device. The EFA driver prints the device's own max_link_speed_gbps, rounded down to
# an InfiniBand step (efa_link_gbps_to_speed_and_width, amzn/amzn-drivers
# kernel/linux/efa/src/efa_verbs.c, commit c4c79265, first in efa_linux_2.13.0; before
# it every port printed 100, and a device that reports 0 still prints 100). Only the
# types a public source pins:
# - p4d, p4de: 4 x 100 Gbps EFA (aws-samples/aws-efa-eks; p4de is p4d's platform in
#   aws/aws-ofi-nccl);
# - p5, p5e: 32 network cards, 3,200 Gbps (the EC2 user guide's EFA instance types),
#   100 per device, as libfabric's fi_info prints it on a p5 (speed 100000000000,
#   Hugging Face's Smol Training Playbook);
# - p5en: 200 per device, AWS's own aws-ofi-nccl (src/nccl_ofi_net.cpp at 2daf7d30:
#   "Overriding OFI link_attr speed to 200Gbps/link for P5en platform", for drivers
#   that do not report it yet).
# p6-b200, p6e-gb200 and trn2 are left out: no public capture or AWS figure per
# device was found (operators add them, or set efa_degraded_expected_rate_gbps).
DEFAULT_EFA_RATE_BY_INSTANCE_TYPE: dict[str, int] = {
    "p4d.24xlarge": 100,
    "p4de.24xlarge": 100,
    "p5.48xlarge": 100,
    "p5e.48xlarge": 100,
    "p5en.48xlarge": 200,
}
# What every EFA port printed before the driver reported the device's speed, and the
# first driver that does (amzn-drivers efa_linux_2.13.0; it writes its version, e.g.
# "3.1.0g", to /sys/module/efa/version through MODULE_VERSION in efa_main.c).
EFA_LEGACY_RATE_GBPS = 100
EFA_RATE_REPORTING_DRIVER: tuple[int, int, int] = (2, 13, 0)
# Counter -> smallest increase per cycle reported as a burst (an NPD event, no
# action). The sizes of the token buckets of AWS's own EFA check, which warns
# (EFAErrorMetric, severity Warning) on an increase its bucket cannot take:
# 100 for the error counters and rx_drops, 1,000 for retrans_pkts
# (aws/eks-node-monitoring-agent monitors/networking/efa/efa.go, NewEFASystem, at
# 51af549). A busy fabric produces some of each: "slow creep in errors is not
# fatal", in that file's words.
DEFAULT_EFA_COUNTER_THRESHOLDS: dict[str, int] = {
    "rdma_read_wr_err": 101,
    "rdma_write_wr_err": 101,
    "unresponsive_remote_events": 101,
    "impaired_remote_conn_events": 101,
    "retrans_timeout_events": 101,
    "rx_drops": 101,
    "retrans_pkts": 1001,
}

# efa-degraded (condition EfaDegraded): the EFA port counters that mean trouble
# (EFA_DEFINE_PORT_STATS, amzn/amzn-drivers kernel/linux/efa/src/efa_verbs.c), never
# the traffic counters (bytes, packets, work requests) nor ``lifespan`` (the cache
# time of the counters, rdma core). The driver has rx_drops and no tx_drops.
EFA_DEGRADATION_COUNTERS: tuple[str, ...] = (
    "retrans_timeout_events",
    "unresponsive_remote_events",
    "impaired_remote_conn_events",
    "rx_drops",
    "rdma_read_wr_err",
    "rdma_write_wr_err",
)
# Counter -> rate (per minute, over the window) from which it is a degradation.
# 60 a minute: the refill rate of AWS's own EFA check, one a second per counter
# (rate.Every(time.Second), aws/eks-node-monitoring-agent
# monitors/networking/efa/efa.go at 51af549), the rate its token bucket cannot
# keep up with, judged here over five minutes or more instead of a minute. AWS
# calls its check a stopgap "while we dont have an authoritative approach"; no
# public fleet data gives a better one. Its check only warns; this one starts a
# repair, so it counts only what points at this node:
# - unresponsive_remote_events and impaired_remote_conn_events are off: they
#   count what a *remote* did (AWS's CloudWatch EFA metrics describe them so):
#   when one node of a gang dies, the nodes that talk to it may see them, and
#   counting them could quarantine the healthy nodes of the gang with it.
# - rdma_read_wr_err and rdma_write_wr_err are off: an application raises them
#   with its own failed requests, and a tenant must not be able to put a node
#   into a repair (docs/security.md).
# efa-counters still reports bursts of all of them as events.
DEFAULT_EFA_DEGRADED_COUNTER_THRESHOLDS: dict[str, int] = {
    "retrans_timeout_events": 60,
    "rx_drops": 60,
}

# nvlink_errors:<kind> -> rate per minute from which it is a degradation (see
# AgentConfig.degraded_nvlink_error_thresholds).
DEFAULT_NVLINK_ERROR_THRESHOLDS: dict[str, int] = {"replay": 1, "recovery": 1, "crc": 6000}

# gpu-degraded: what it can report (the ``what`` of a finding). The clock-event
# reasons are NVML's (nvml.h nvmlClocksEventReason*), as nvidia-smi names them
# (agent/checks/nvidia_smi.py CLOCK_EVENT_KEYS); Idle is no slowdown and is not one.
CLOCK_EVENT_PREFIX = "clock_event:"
ECC_CORRECTABLE = "ecc_correctable"
NVLINK_DOWN = "nvlink_down"
NVLINK_ERRORS_PREFIX = "nvlink_errors:"
NVLINK_ERROR_SIGNALS: tuple[str, ...] = tuple(
    NVLINK_ERRORS_PREFIX + kind for kind in ("replay", "recovery", "crc")
)
DEGRADED_SIGNALS: tuple[str, ...] = (
    "pcie_width",
    "pcie_gen",
    ECC_CORRECTABLE,
    NVLINK_DOWN,
    *NVLINK_ERROR_SIGNALS,
    *(
        CLOCK_EVENT_PREFIX + reason
        for reason in (
            "hw_slowdown",
            "hw_thermal_slowdown",
            "hw_power_brake_slowdown",
            "sw_thermal_slowdown",
            "sw_power_cap",
            "sync_boost",
            "applications_clocks_setting",
            "display_clock_setting",
        )
    ),
)
# On by default: the link and the reasons that cut the clocks for a hardware or
# thermal cause: the ones `dcgmi diag --clocksevent-mask` can tell the diagnostic
# to ignore (bits 8, 32, 64, 128; dcgmi/CommandLineParser.cpp), gpud's hw-slowdown
# reasons besides. SW Power Cap is the GPU keeping to its power limit; Sync Boost,
# Applications Clocks and Display Clock are settings: normal, not a degradation,
# unless an operator adds them.
DEFAULT_DEGRADED_CHECKS: tuple[str, ...] = (
    "pcie_width",
    "pcie_gen",
    ECC_CORRECTABLE,
    NVLINK_DOWN,
    *NVLINK_ERROR_SIGNALS,
    "clock_event:hw_slowdown",
    "clock_event:hw_thermal_slowdown",
    "clock_event:hw_power_brake_slowdown",
    "clock_event:sw_thermal_slowdown",
)

KERNEL_LOG_KINDS = ("kmsg", "journal", "file")
_INSTANCE_TYPE = re.compile(r"^[a-z0-9][a-z0-9.-]{0,63}$")


class ConfigError(ValueError):
    """A setting is missing, of the wrong type or out of range (the message names it)."""


class AgentConfig:
    """Everything one check cycle needs. Durations are seconds.

    Class attributes are the defaults; build instances with :func:`load_config`
    (the tables are shared defaults and never mutated: changes make new dicts).
    """

    # Where state survives between runs (kernel-log position, held Xids, hang counts).
    state_dir: str = "/var/lib/remediate-agent"
    # NPD cuts the plugin's stdout at its max_output_length: the message must fit.
    max_output_length: int = 1024
    # The whole cycle must finish before NPD's rule timeout kills the agent.
    deadline: float = 20.0
    lock_timeout: float = 2.0
    # DCGM: `dcgmi health -c -j`, against the host engine on dcgm_host (default: local).
    dcgm_enabled: bool = True
    dcgmi: str = "dcgmi"
    dcgm_host: str | None = None
    dcgm_timeout: float = 10.0
    dcgm_set_watches: bool = True
    # nvidia-smi -q: GPU count, driver recovery action, row remapping.
    nvidia_smi: str = "nvidia-smi"
    nvidia_smi_timeout: float = 10.0
    expected_gpus: int | None = None
    gpus_by_instance_type: dict[str, int] = DEFAULT_GPUS_BY_INSTANCE_TYPE
    # Instance type: set, or read from DMI (EC2 Nitro reports it as the product name).
    instance_type: str | None = None
    instance_type_path: str = "/sys/devices/virtual/dmi/id/product_name"
    # Kernel log: "kmsg:/dev/kmsg", "journal" / "journal:<directory>", "file:<path>" (or a path).
    kernel_log: str = "kmsg:/dev/kmsg"
    journalctl: str = "journalctl"
    journal_timeout: float = 10.0
    # First run with no saved position: scan back at most this far for the boot start.
    kernel_log_first_run_bytes: int = 256 * 1024 * 1024
    rotated_suffixes: tuple[str, ...] = (".1",)
    boot_id_path: str = "/proc/sys/kernel/random/boot_id"
    nvidia_proc_gpus: str = "/proc/driver/nvidia/gpus"
    # Xids are events: keep reporting one this long after it was read (0: one cycle only).
    xid_hold: float = 300.0
    report_informational_xids: bool = False
    # A tool that hangs this many cycles in a row is reported as a problem (driver wedged).
    hang_cycles_to_problem: int = 3
    # EFA.
    sysfs_root: str = "/sys"
    fi_info: str = "fi_info"
    fi_info_timeout: float = 5.0
    expected_efa: int | None = None
    efa_by_instance_type: dict[str, int] = DEFAULT_EFA_BY_INSTANCE_TYPE
    efa_counter_thresholds: dict[str, int] = DEFAULT_EFA_COUNTER_THRESHOLDS
    # gpu-degraded (condition GpuDegraded): GPUs that work, slowly. Signals read from
    # `nvidia-smi -q` (names in DEGRADED_SIGNALS).
    degraded_checks: tuple[str, ...] = DEFAULT_DEGRADED_CHECKS
    # Consecutive cycles (30 s apart under NPD) a signal must be degraded before it
    # is reported: a PCIe link is read at a P-state change now and then; a clock
    # event reason is also set for a moment at P-state and clock changes (nvml.h).
    degraded_pcie_cycles: int = 2
    degraded_clock_event_cycles: int = 10
    # Those cycles must fall within this many seconds (gpud's hw-slowdown window),
    # and a signal not seen degraded for this long is forgotten.
    degraded_window: float = 600.0
    # The PCIe generation drops when the GPU is not in use: it is judged only in
    # P0 (DCGM's link check) with at least this GPU utilization (percent).
    degraded_pcie_gen_min_utilization: int = 10
    # Compare the link with these instead of the Max nvidia-smi prints, for
    # platforms that wire the GPU narrower than NVML's Max (DCGM: min_pci_width
    # and min_pci_generation per SKU).
    degraded_pcie_expected_width: int | None = None
    degraded_pcie_expected_gen: int | None = None
    # ecc_correctable: the GPU's volatile corrected ECC errors (SRAM plus DRAM; Single
    # Bit before Ampere) rising at this many a minute or more, over readings that span
    # degraded_counter_min_span within degraded_window. ASSUMPTION: no public rate
    # exists. NVIDIA publishes none (its memory-error note leaves correctable errors
    # out; its RMA criteria are uncorrectable ones); DCGM's health watch reads no
    # corrected count (its DCGM_LIMIT_MAX_SBE_RATE of 10 is a "dummy value", used
    # nowhere); operators that check use totals: Azure's health checks fail a GPU over
    # 20,000,000 DRAM or 10,000 SRAM corrected errors (azurehpc-health-checks, H100
    # conf), Meta's GCM over 50,000,000 volatile. 1,000 a minute held five minutes is
    # 5,000 corrections: memory correcting that often is worth a diagnostic once idle.
    degraded_ecc_correctable_per_minute: int = 1000
    degraded_counter_min_span: float = 300.0
    # nvlink_down: a link `nvidia-smi nvlink -s` showed active earlier this boot now
    # <inactive>, or fewer active links than this (None: no count is expected; a GPU
    # whose links never came up, as a PCIe A100 without a bridge, is then no finding).
    degraded_nvlink_expected_links: int | None = None
    # nvlink_errors:<kind>: a GPU's NVLink error counters (`nvidia-smi nvlink -e`,
    # summed over its links) rising at this many a minute or more, over readings that
    # span degraded_counter_min_span. DCGM's health watch fails a GPU on any replay or
    # recovery error within its minute and on CRC errors at 100 a second
    # (DCGM_LIMIT_MAX_NVLINK_CRC_ERROR, "RM has informed us that CRC errors only
    # matter at rates of 100+ per second": common/DcgmGPUHardwareLimits.h,
    # modules/health/DcgmHealthWatch.cpp, NVIDIA/DCGM 4.6.0); with DCGM running the
    # gpu check reports those as faults. Here, without DCGM too: replay and recovery
    # at 1 a minute held five minutes, CRC at DCGM's 6,000 a minute.
    degraded_nvlink_error_thresholds: dict[str, int] = DEFAULT_NVLINK_ERROR_THRESHOLDS

    # efa-degraded (condition EfaDegraded): EFA ports that work, slowly.
    # The port rate (Gb/sec) each EFA port should report, over the instance type's
    # (efa_rate_by_instance_type, 0 turns a type off); None: the instance type's, if
    # it has one (AgentConfig.expected_efa_rate).
    efa_degraded_expected_rate_gbps: int | None = None
    efa_rate_by_instance_type: dict[str, int] = DEFAULT_EFA_RATE_BY_INSTANCE_TYPE
    # Consecutive cycles a port must read below the expected rate to be reported.
    efa_degraded_rate_cycles: int = 2
    # Rate streaks must fall within this many seconds; counter rates are measured
    # over the readings of this many seconds.
    efa_degraded_window: float = 600.0
    # A counter's rate is judged once its readings span at least this many seconds
    # (five minutes: ten NPD cycles, one blip is not a rate).
    efa_degraded_counter_min_span: float = 300.0
    efa_degraded_counter_thresholds: dict[str, int] = DEFAULT_EFA_DEGRADED_COUNTER_THRESHOLDS

    def __init__(self, **values: Any) -> None:
        """Set the given settings; the rest keep their defaults.

        Raises:
            ConfigError: An unknown setting name.
        """
        for name, value in values.items():
            if name not in _FIELD_TYPES:
                raise ConfigError(f"unknown setting {name!r}")
            setattr(self, name, value)

    def values(self) -> dict[str, Any]:
        """Every setting and its value."""
        return {name: getattr(self, name) for name in _FIELD_TYPES}

    @property
    def kernel_log_kind(self) -> str:
        """``kmsg``, ``journal`` or ``file``."""
        return _split_source(self.kernel_log)[0]

    @property
    def kernel_log_target(self) -> str:
        """The device, journal directory ("" for the system journal) or file path."""
        return _split_source(self.kernel_log)[1]

    def state_path(self, check: str) -> Path:
        """The state file of one check (checks run concurrently under NPD)."""
        return Path(self.state_dir) / f"{check}.json"

    def resolved_instance_type(self) -> str | None:
        """The configured instance type, else the DMI product name, else None."""
        if self.instance_type:
            return self.instance_type
        try:
            text = Path(self.instance_type_path).read_text(encoding="ascii", errors="replace")
        except OSError:
            return None
        value = text.strip().lower()
        return value if _INSTANCE_TYPE.match(value) else None

    def expected_gpu_count(self) -> tuple[int | None, str]:
        """(expected GPUs, where the number comes from)."""
        if self.expected_gpus is not None:
            return self.expected_gpus, "configured"
        itype = self.resolved_instance_type()
        if itype and itype in self.gpus_by_instance_type:
            return self.gpus_by_instance_type[itype], itype
        return None, itype or "unknown instance type"

    def expected_efa_count(self) -> tuple[int | None, str]:
        """(expected EFA devices, where the number comes from)."""
        if self.expected_efa is not None:
            return self.expected_efa, "configured"
        itype = self.resolved_instance_type()
        if itype and itype in self.efa_by_instance_type:
            return self.efa_by_instance_type[itype], itype
        return None, itype or "unknown instance type"

    def expected_efa_rate(self) -> tuple[int | None, str]:
        """(Gb/s each EFA port should show, where it comes from) or (None, why not).

        An instance type's rate above what old drivers print for every port is
        judged only under a driver known to report the device's speed: under an
        older or unknown driver every port would read low.
        """
        if self.efa_degraded_expected_rate_gbps is not None:
            return self.efa_degraded_expected_rate_gbps, "configured"
        itype = self.resolved_instance_type()
        if not itype or itype not in self.efa_rate_by_instance_type:
            return None, f"no expected rate for {itype or 'an unknown instance type'}"
        rate = self.efa_rate_by_instance_type[itype]
        if rate == 0:
            return None, f"{itype}: turned off (0)"
        if rate <= EFA_LEGACY_RATE_GBPS:
            return rate, itype
        path = Path(self.sysfs_root) / "module" / "efa" / "version"
        try:
            with path.open("rb") as file:  # a version is a few bytes: read no more
                text = file.read(64).decode("ascii", errors="replace").strip()
        except OSError:
            return None, f"{itype}: EFA driver version unreadable ({path})"
        version = efa_driver_version(text)
        if version is None:
            return None, f"{itype}: EFA driver version {text!r} not understood"
        if version < EFA_RATE_REPORTING_DRIVER:
            return None, f"{itype}: EFA driver {text} prints {EFA_LEGACY_RATE_GBPS} for every port"
        return rate, itype


_EFA_DRIVER_VERSION = re.compile(r"^(\d{1,4})\.(\d{1,4})\.(\d{1,4})[a-z]{0,8}$")


def efa_driver_version(text: str) -> tuple[int, int, int] | None:
    """``"3.1.0g"`` -> (3, 1, 0); None for anything else."""
    match = _EFA_DRIVER_VERSION.match(text)
    if match is None:
        return None
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch


def _split_source(value: str) -> tuple[str, str]:
    kind, sep, target = value.partition(":")
    if sep and kind in KERNEL_LOG_KINDS:
        if kind == "kmsg":
            return kind, target or "/dev/kmsg"
        return kind, target
    if value == "journal":
        return "journal", ""
    if value == "kmsg":
        return "kmsg", "/dev/kmsg"
    return "file", value


# ------------------------------------------------------------------ validation

_BOOL_WORDS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}


def _as_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _BOOL_WORDS:
        return _BOOL_WORDS[value.strip().lower()]
    raise ValueError("expected true or false")


def _as_int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError("expected an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        return int(value)
    raise ValueError("expected an integer")


def _as_float(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("expected a number of seconds")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    raise ValueError("expected a number of seconds")


def _as_str(value: Any) -> str:
    if isinstance(value, str) and value and "\x00" not in value:
        return value
    raise ValueError("expected a non-empty string")


def _as_mapping(value: Any) -> dict[str, int]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as err:
            raise ValueError(f"expected a JSON object ({err.msg})") from err
    if not isinstance(value, Mapping):
        raise ValueError("expected a mapping of names to integers")
    result: dict[str, int] = {}
    for key, number in value.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"bad key {key!r}")
        count = _as_int(number)
        if count < 0:
            raise ValueError(f"{key}: must not be negative")
        result[key] = count
    return result


def _as_tuple(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [part for part in value.split(",") if part]
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v for v in value):
        raise ValueError("expected a list of strings")
    return tuple(value)


_CONVERTERS: dict[str, Any] = {
    "bool": _as_bool,
    "int": _as_int,
    "float": _as_float,
    "str": _as_str,
    "int | None": lambda v: None if v is None or v == "" else _as_int(v),
    "str | None": lambda v: None if v is None or v == "" else _as_str(v),
    "dict[str, int]": _as_mapping,
    "tuple[str, ...]": _as_tuple,
}
_FIELD_TYPES: dict[str, str] = {
    name: str(kind) for name, kind in AgentConfig.__annotations__.items()
}
# Tables merge over the defaults, so a config file adds instance types without repeating ours.
_MERGED = frozenset(
    {
        "gpus_by_instance_type",
        "efa_by_instance_type",
        "efa_rate_by_instance_type",
        "efa_counter_thresholds",
        "efa_degraded_counter_thresholds",
        "degraded_nvlink_error_thresholds",
    }
)


def _check_ranges(config: AgentConfig) -> None:
    positive = (
        "deadline",
        "dcgm_timeout",
        "nvidia_smi_timeout",
        "journal_timeout",
        "fi_info_timeout",
        "lock_timeout",
    )
    for name in positive:
        if not getattr(config, name) > 0:
            raise ConfigError(f"{name}: must be greater than 0")
    if config.xid_hold < 0:
        raise ConfigError("xid_hold: must not be negative")
    if not 40 <= config.max_output_length <= 4096:
        # NPD reads at most 4 KiB of plugin output.
        raise ConfigError("max_output_length: must be between 40 and 4096")
    if config.hang_cycles_to_problem < 1:
        raise ConfigError("hang_cycles_to_problem: must be at least 1")
    if config.kernel_log_first_run_bytes < 0:
        raise ConfigError("kernel_log_first_run_bytes: must not be negative")
    for name in ("expected_gpus", "expected_efa"):
        value = getattr(config, name)
        if value is not None and not 0 <= value <= 64:
            raise ConfigError(f"{name}: must be between 0 and 64")
    if config.kernel_log_kind in ("kmsg", "file") and not config.kernel_log_target:
        raise ConfigError("kernel_log: a kmsg or file source needs a path")
    _check_degraded(config)
    _check_efa_degraded(config)


def _check_efa_degraded(config: AgentConfig) -> None:
    unknown = [
        name
        for name in config.efa_degraded_counter_thresholds
        if name not in EFA_DEGRADATION_COUNTERS
    ]
    if unknown:
        raise ConfigError(
            f"efa_degraded_counter_thresholds: not an EFA error counter: {', '.join(unknown)}"
            f" (known: {', '.join(EFA_DEGRADATION_COUNTERS)})"
        )
    rate = config.efa_degraded_expected_rate_gbps
    if rate is not None and not 1 <= rate <= 100_000:
        raise ConfigError("efa_degraded_expected_rate_gbps: must be between 1 and 100000")
    too_fast = [k for k, v in config.efa_rate_by_instance_type.items() if v > 100_000]
    if too_fast:
        raise ConfigError(
            f"efa_rate_by_instance_type: over 100000 Gb/sec for {', '.join(sorted(too_fast))}"
        )
    if not 1 <= config.efa_degraded_rate_cycles <= 100:
        raise ConfigError("efa_degraded_rate_cycles: must be between 1 and 100")
    if not config.efa_degraded_window > 0:
        raise ConfigError("efa_degraded_window: must be greater than 0")
    if not 0 < config.efa_degraded_counter_min_span < config.efa_degraded_window:
        raise ConfigError(
            "efa_degraded_counter_min_span: must be greater than 0 and less than"
            " efa_degraded_window"
        )


def _check_degraded(config: AgentConfig) -> None:
    unknown = [name for name in config.degraded_checks if name not in DEGRADED_SIGNALS]
    if unknown:
        raise ConfigError(
            f"degraded_checks: unknown {', '.join(unknown)} (known: {', '.join(DEGRADED_SIGNALS)})"
        )
    for name in ("degraded_pcie_cycles", "degraded_clock_event_cycles"):
        # The state keeps one time per cycle of a streak: a bounded list.
        if not 1 <= getattr(config, name) <= 100:
            raise ConfigError(f"{name}: must be between 1 and 100")
    if not config.degraded_window > 0:
        raise ConfigError("degraded_window: must be greater than 0")
    if not 0 < config.degraded_counter_min_span < config.degraded_window:
        raise ConfigError(
            "degraded_counter_min_span: must be greater than 0 and less than degraded_window"
        )
    if not config.degraded_ecc_correctable_per_minute >= 1:
        raise ConfigError("degraded_ecc_correctable_per_minute: must be at least 1")
    kinds = {name.removeprefix(NVLINK_ERRORS_PREFIX) for name in NVLINK_ERROR_SIGNALS}
    unknown = sorted(set(config.degraded_nvlink_error_thresholds) - kinds)
    if unknown:
        raise ConfigError(
            f"degraded_nvlink_error_thresholds: unknown {', '.join(unknown)}"
            f" (known: {', '.join(sorted(kinds))})"
        )
    links = config.degraded_nvlink_expected_links
    if links is not None and not 1 <= links <= 64:
        raise ConfigError("degraded_nvlink_expected_links: must be between 1 and 64")
    if not 0 <= config.degraded_pcie_gen_min_utilization <= 100:
        raise ConfigError("degraded_pcie_gen_min_utilization: must be between 0 and 100")
    width, gen = config.degraded_pcie_expected_width, config.degraded_pcie_expected_gen
    if width is not None and not 1 <= width <= 32:
        raise ConfigError("degraded_pcie_expected_width: must be between 1 and 32 (lanes)")
    if gen is not None and not 1 <= gen <= 9:
        raise ConfigError("degraded_pcie_expected_gen: must be between 1 and 9")


def _apply(config: AgentConfig, values: Mapping[str, Any], origin: str) -> AgentConfig:
    changes: dict[str, Any] = {}
    for name, raw in values.items():
        kind = _FIELD_TYPES.get(name)
        if kind is None:
            raise ConfigError(f"{origin}: unknown setting {name!r}")
        try:
            value = _CONVERTERS[kind](raw)
        except ValueError as err:
            raise ConfigError(f"{origin}: {name}: {err}") from err
        if name in _MERGED:
            value = {**getattr(config, name), **value}
        changes[name] = value
    return AgentConfig(**{**config.values(), **changes})


def load_config(
    path: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> AgentConfig:
    """Build the settings: defaults, then ``path`` (JSON), then the environment, then ``overrides``.

    Args:
        path: A JSON object of settings, or None.
        env: The environment (``REMEDIATE_AGENT_<SETTING>``); ``os.environ`` when None.
        overrides: Values from CLI flags (None values are ignored).

    Raises:
        ConfigError: A file that cannot be read or parsed, an unknown setting,
            or a bad value (the message names the setting and its origin).
    """
    config = AgentConfig()
    if path is not None:
        try:
            document = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ConfigError(f"config file {path}: {err}") from err
        if not isinstance(document, dict):
            raise ConfigError(f"config file {path}: expected a JSON object")
        config = _apply(config, document, f"config file {path}")
    source = os.environ if env is None else env
    from_env = {
        name: source[ENV_PREFIX + name.upper()]
        for name in _FIELD_TYPES
        if ENV_PREFIX + name.upper() in source
    }
    config = _apply(config, from_env, "environment")
    if overrides:
        config = _apply(config, {k: v for k, v in overrides.items() if v is not None}, "flag")
    _check_ranges(config)
    return config
