"""DCGM's error table as data: every ``dcgmError_t`` id with DCGM's own severity and message.

Generated from NVIDIA/DCGM @ 72fa3fea (DCGM 4.6.0): ids and message templates
from ``dcgmlib/dcgm_errors.h``, severity and category from the
``dcgmErrorMeta`` table of ``dcgmlib/src/dcgm_errors.c``. ``catalog.dcgm_class``
falls back to the severity for ids the project's own table does not decide;
``tool_outputs.dcgm_health`` recognises the id of a health message by its
template (``dcgmi health -j`` prints messages, not ids).

Nothing here does I/O: the module is imported by workflow code.
"""

# ruff: noqa: E501  (one row per DCGM id, as in dcgm_errors.c)

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple

DCGM_SOURCE = "NVIDIA/DCGM @ 72fa3fea (4.6.0): dcgmlib/dcgm_errors.h, dcgmlib/src/dcgm_errors.c"


class DcgmSeverity(IntEnum):
    """``dcgmErrorSeverity_t``."""

    NONE = 0
    MONITOR = 1  # can perform workload, but needs to be monitored
    ISOLATE = 2  # cannot perform workload: the GPU should be isolated
    UNKNOWN = 3
    TRIAGE = 4
    CONFIG = 5  # a configuration to fix, not a hardware fault
    RESET = 6  # drain and reset the GPU


class DcgmCategory(IntEnum):
    """``dcgmErrorCategory_t``."""

    NONE = 0
    PERF_THRESHOLD = 1
    PERF_VIOLATION = 2
    SOFTWARE_CONFIG = 3
    SOFTWARE_LIBRARY = 4
    SOFTWARE_XID = 5
    SOFTWARE_CUDA = 6
    SOFTWARE_EUD = 7
    SOFTWARE_OTHER = 8
    HARDWARE_THERMAL = 9
    HARDWARE_MEMORY = 10
    HARDWARE_NVLINK = 11
    HARDWARE_NVSWITCH = 12
    HARDWARE_PCIE = 13
    HARDWARE_POWER = 14
    HARDWARE_OTHER = 15
    INTERNAL_OTHER = 16


HARDWARE_CATEGORIES = frozenset(c for c in DcgmCategory if c.name.startswith("HARDWARE_"))


class DcgmErrorMeta(NamedTuple):
    """One row of ``dcgmErrorMeta``."""

    name: str
    severity: DcgmSeverity
    category: DcgmCategory
    message: str  # printf template of the ``_MSG`` macro, "" when DCGM defines none


_S = DcgmSeverity
_C = DcgmCategory
# fmt: off
DCGM_ERROR_META: dict[int, DcgmErrorMeta] = {
    0: DcgmErrorMeta("OK", _S.UNKNOWN, _C.NONE, "The operation completed successfully."),
    1: DcgmErrorMeta("UNKNOWN", _S.UNKNOWN, _C.NONE, "Unknown error."),
    2: DcgmErrorMeta("UNRECOGNIZED", _S.UNKNOWN, _C.NONE, "Unrecognized error code."),
    3: DcgmErrorMeta("PCI_REPLAY_RATE", _S.ISOLATE, _C.HARDWARE_PCIE, "Detected more than %u PCIe replays per minute for GPU %u : %d"),
    4: DcgmErrorMeta("VOLATILE_DBE_DETECTED", _S.ISOLATE, _C.HARDWARE_MEMORY, "Detected %d volatile double-bit ECC error(s) in GPU %u."),
    5: DcgmErrorMeta("VOLATILE_SBE_DETECTED", _S.MONITOR, _C.HARDWARE_MEMORY, "More than %u single-bit ECC error(s) detected in GPU %u Volatile SBEs: %lld"),
    6: DcgmErrorMeta("PENDING_PAGE_RETIREMENTS", _S.RESET, _C.HARDWARE_MEMORY, "A pending retired page has been detected in GPU %u."),
    7: DcgmErrorMeta("RETIRED_PAGES_LIMIT", _S.ISOLATE, _C.HARDWARE_MEMORY, "%u or more retired pages have been detected in GPU %u. "),
    8: DcgmErrorMeta("RETIRED_PAGES_DBE_LIMIT", _S.ISOLATE, _C.HARDWARE_MEMORY, "An excess of %u retired pages due to DBEs have been detected and more than one page has been retired due to DBEs in the past week in GPU %u."),
    9: DcgmErrorMeta("CORRUPT_INFOROM", _S.TRIAGE, _C.HARDWARE_OTHER, "A corrupt InfoROM has been detected in GPU %u."),
    10: DcgmErrorMeta("CLOCKS_EVENT_THERMAL", _S.MONITOR, _C.HARDWARE_THERMAL, "Detected clocks event due to thermal violation in GPU %u."),
    11: DcgmErrorMeta("POWER_UNREADABLE", _S.MONITOR, _C.HARDWARE_POWER, "Cannot reliably read the power usage for GPU %u."),
    12: DcgmErrorMeta("CLOCKS_EVENT_POWER", _S.MONITOR, _C.HARDWARE_POWER, "Detected clocks event due to power violation in GPU %u."),
    13: DcgmErrorMeta("NVLINK_ERROR_THRESHOLD", _S.ISOLATE, _C.HARDWARE_NVLINK, "Detected %ld %s NvLink errors on GPU %u's NVLink which exceeds threshold of %u"),
    14: DcgmErrorMeta("NVLINK_DOWN", _S.TRIAGE, _C.HARDWARE_NVLINK, "GPU %u's NvLink link %d is currently down"),
    15: DcgmErrorMeta("NVSWITCH_FATAL_ERROR", _S.ISOLATE, _C.HARDWARE_NVSWITCH, "Detected fatal errors on NvSwitch %u link %u"),
    16: DcgmErrorMeta("NVSWITCH_NON_FATAL_ERROR", _S.MONITOR, _C.HARDWARE_NVSWITCH, "Detected nonfatal errors on NvSwitch %u link %u"),
    17: DcgmErrorMeta("NVSWITCH_DOWN", _S.MONITOR, _C.HARDWARE_NVSWITCH, "NvSwitch physical ID %u's NvLink port %d is currently down."),
    18: DcgmErrorMeta("NO_ACCESS_TO_FILE", _S.CONFIG, _C.SOFTWARE_OTHER, "File %s could not be accessed directly: %s"),
    19: DcgmErrorMeta("NVML_API", _S.MONITOR, _C.SOFTWARE_LIBRARY, "Error calling NVML API %s: %s"),
    20: DcgmErrorMeta("DEVICE_COUNT_MISMATCH", _S.CONFIG, _C.SOFTWARE_OTHER, "The number of devices NVML returns is different than the number of devices in /dev."),
    21: DcgmErrorMeta("BAD_PARAMETER", _S.UNKNOWN, _C.INTERNAL_OTHER, "Bad parameter to function %s cannot be processed"),
    22: DcgmErrorMeta("CANNOT_OPEN_LIB", _S.TRIAGE, _C.SOFTWARE_LIBRARY, "Cannot open library %s: '%s'"),
    23: DcgmErrorMeta("DENYLISTED_DRIVER", _S.CONFIG, _C.SOFTWARE_CONFIG, "Found driver on the denylist: %s"),
    24: DcgmErrorMeta("NVML_LIB_BAD", _S.ISOLATE, _C.SOFTWARE_LIBRARY, "Cannot get pointer to %s from libnvidia-ml.so"),
    25: DcgmErrorMeta("GRAPHICS_PROCESSES", _S.RESET, _C.SOFTWARE_OTHER, "NVVS has detected processes with graphics contexts open running on at least one GPU. This may cause some tests to fail."),
    26: DcgmErrorMeta("HOSTENGINE_CONN", _S.MONITOR, _C.INTERNAL_OTHER, "Could not connect to the host engine: '%s'"),
    27: DcgmErrorMeta("FIELD_QUERY", _S.MONITOR, _C.INTERNAL_OTHER, "Could not query field %s for GPU %u"),
    28: DcgmErrorMeta("BAD_CUDA_ENV", _S.CONFIG, _C.SOFTWARE_CUDA, "Found CUDA performance-limiting environment variable '%s'."),
    29: DcgmErrorMeta("PERSISTENCE_MODE", _S.CONFIG, _C.SOFTWARE_OTHER, "Persistence mode for GPU %u is disabled."),
    30: DcgmErrorMeta("LOW_BANDWIDTH", _S.TRIAGE, _C.HARDWARE_PCIE, "Bandwidth of GPU %u in direction %s of %.2f did not exceed minimum required bandwidth of %.2f."),
    31: DcgmErrorMeta("HIGH_LATENCY", _S.TRIAGE, _C.HARDWARE_PCIE, "Latency type %s of GPU %u value %.2f exceeded maximum allowed latency of %.2f."),
    32: DcgmErrorMeta("CANNOT_GET_FIELD_TAG", _S.MONITOR, _C.INTERNAL_OTHER, "Unable to get field information for field id %hu"),
    33: DcgmErrorMeta("FIELD_VIOLATION", _S.ISOLATE, _C.HARDWARE_OTHER, "Detected %ld %s for GPU %u"),
    34: DcgmErrorMeta("FIELD_THRESHOLD", _S.MONITOR, _C.PERF_VIOLATION, "Detected %ld %s for GPU %u which is above the threshold %ld"),
    35: DcgmErrorMeta("FIELD_VIOLATION_DBL", _S.ISOLATE, _C.PERF_VIOLATION, "Detected %.1f %s for GPU %u"),
    36: DcgmErrorMeta("FIELD_THRESHOLD_DBL", _S.ISOLATE, _C.PERF_VIOLATION, "Detected %.1f %s for %s:%u which is above the threshold %.1f"),
    37: DcgmErrorMeta("UNSUPPORTED_FIELD_TYPE", _S.TRIAGE, _C.INTERNAL_OTHER, "Field %s is not supported by this API because it is neither an int64 nor a double type."),
    38: DcgmErrorMeta("FIELD_THRESHOLD_TS", _S.ISOLATE, _C.PERF_THRESHOLD, "%s met or exceeded the threshold of %lu per second: %lu at %.1f seconds into the test."),
    39: DcgmErrorMeta("FIELD_THRESHOLD_TS_DBL", _S.ISOLATE, _C.PERF_THRESHOLD, "%s met or exceeded the threshold of %.1f per second: %.1f at %.1f seconds into the test."),
    40: DcgmErrorMeta("THERMAL_VIOLATIONS", _S.MONITOR, _C.HARDWARE_THERMAL, "There were thermal violations totaling %.1f seconds for GPU %u"),
    41: DcgmErrorMeta("THERMAL_VIOLATIONS_TS", _S.MONITOR, _C.HARDWARE_THERMAL, "Thermal violations totaling %.1f seconds started at %.1f seconds into the test for GPU %u"),
    42: DcgmErrorMeta("TEMP_VIOLATION", _S.MONITOR, _C.HARDWARE_THERMAL, "Temperature %lld of %s %u exceeded user-specified maximum allowed temperature %lld"),
    43: DcgmErrorMeta("CLOCKS_EVENT_VIOLATION", _S.MONITOR, _C.HARDWARE_OTHER, "Clocks event for GPU %u because of clocks event starting %.1f seconds into the test. %s"),
    44: DcgmErrorMeta("INTERNAL", _S.TRIAGE, _C.INTERNAL_OTHER, "There was an internal error during the test: '%s'"),
    45: DcgmErrorMeta("PCIE_GENERATION", _S.TRIAGE, _C.HARDWARE_PCIE, "GPU %u is running at PCI link generation %d, which is below the minimum allowed link generation of %d (parameter '%s')"),
    46: DcgmErrorMeta("PCIE_WIDTH", _S.CONFIG, _C.HARDWARE_PCIE, "GPU %u is running at PCI link width %dX, which is below the minimum allowed link generation of %d (parameter '%s')"),
    47: DcgmErrorMeta("ABORTED", _S.CONFIG, _C.SOFTWARE_OTHER, "Test was aborted early due to user signal"),
    48: DcgmErrorMeta("TEST_DISABLED", _S.CONFIG, _C.SOFTWARE_CONFIG, "The %s test is skipped."),
    49: DcgmErrorMeta("CANNOT_GET_STAT", _S.TRIAGE, _C.INTERNAL_OTHER, "Unable to generate / collect stat %s for GPU %u"),
    50: DcgmErrorMeta("STRESS_LEVEL", _S.TRIAGE, _C.PERF_THRESHOLD, "Max stress level of %.1f did not reach desired stress level of %.1f for GPU %u"),
    51: DcgmErrorMeta("CUDA_API", _S.MONITOR, _C.SOFTWARE_CUDA, "Error using CUDA API %s"),
    52: DcgmErrorMeta("FAULTY_MEMORY", _S.ISOLATE, _C.HARDWARE_MEMORY, "Found %lld faulty memory elements on GPU %u"),
    53: DcgmErrorMeta("CANNOT_SET_WATCHES", _S.MONITOR, _C.INTERNAL_OTHER, "Unable to add field watches to DCGM: %s"),
    54: DcgmErrorMeta("CUDA_UNBOUND", _S.TRIAGE, _C.SOFTWARE_CUDA, "Cuda GPU %d is no longer bound to a CUDA context...Aborting"),
    55: DcgmErrorMeta("ECC_DISABLED", _S.CONFIG, _C.HARDWARE_MEMORY, "Skipping test %s because ECC is not enabled on GPU %u"),
    56: DcgmErrorMeta("MEMORY_ALLOC", _S.TRIAGE, _C.SOFTWARE_OTHER, "Couldn't allocate at least %.1f%% of GPU memory on GPU %u"),
    57: DcgmErrorMeta("CUDA_DBE", _S.ISOLATE, _C.HARDWARE_MEMORY, "CUDA APIs have indicated that a double-bit ECC error has occured on GPU %u."),
    58: DcgmErrorMeta("MEMORY_MISMATCH", _S.ISOLATE, _C.HARDWARE_MEMORY, "A memory mismatch was detected on GPU %u, but no error was reported by CUDA or NVML."),
    59: DcgmErrorMeta("CUDA_DEVICE", _S.TRIAGE, _C.SOFTWARE_CUDA, "Unable to find a corresponding CUDA device for GPU %u: '%s'"),
    60: DcgmErrorMeta("ECC_UNSUPPORTED", _S.CONFIG, _C.HARDWARE_MEMORY, "ECC Memory is not turned on or is unsupported. Skipping test."),
    61: DcgmErrorMeta("ECC_PENDING", _S.MONITOR, _C.HARDWARE_MEMORY, "ECC memory for GPU %u is in a pending state."),
    62: DcgmErrorMeta("MEMORY_BANDWIDTH", _S.TRIAGE, _C.PERF_THRESHOLD, "GPU %u only achieved a memory bandwidth of %.2f GB/s, failing to meet %.2f GB/s for test %d"),
    63: DcgmErrorMeta("TARGET_POWER", _S.TRIAGE, _C.HARDWARE_POWER, "Max power of %.1f did not reach desired power minimum %s of %.1f for GPU %u"),
    64: DcgmErrorMeta("API_FAIL", _S.TRIAGE, _C.SOFTWARE_OTHER, "API call %s failed: '%s'"),
    65: DcgmErrorMeta("API_FAIL_GPU", _S.TRIAGE, _C.SOFTWARE_OTHER, "API call %s failed for GPU %u: '%s'"),
    66: DcgmErrorMeta("CUDA_CONTEXT", _S.TRIAGE, _C.SOFTWARE_CUDA, "GPU %u failed to create a CUDA context: %s"),
    67: DcgmErrorMeta("DCGM_API", _S.TRIAGE, _C.INTERNAL_OTHER, "Error using DCGM API %s"),
    68: DcgmErrorMeta("CONCURRENT_GPUS", _S.CONFIG, _C.SOFTWARE_CONFIG, "Unable to run concurrent pair bandwidth test without 2 or more gpus. Skipping"),
    69: DcgmErrorMeta("TOO_MANY_ERRORS", _S.MONITOR, _C.SOFTWARE_OTHER, "This API can only return up to four errors per system. Additional errors were found for this system that couldn't be communicated."),
    70: DcgmErrorMeta("NVLINK_CRC_ERROR_THRESHOLD", _S.ISOLATE, _C.HARDWARE_NVLINK, "%.1f %s NvLink errors found occuring per second on GPU %u, exceeding the limit of 100 per second."),
    71: DcgmErrorMeta("NVLINK_ERROR_CRITICAL", _S.ISOLATE, _C.HARDWARE_NVLINK, "Detected %ld %s NvLink errors on GPU %u's NVLink (should be 0)"),
    72: DcgmErrorMeta("ENFORCED_POWER_LIMIT", _S.CONFIG, _C.HARDWARE_POWER, "Enforced power limit on GPU %u set to %.1f, which is too low to attempt to achieve target power %.1f"),
    73: DcgmErrorMeta("MEMORY_ALLOC_HOST", _S.TRIAGE, _C.SOFTWARE_OTHER, "Cannot allocate %zu bytes on the host"),
    74: DcgmErrorMeta("GPU_OP_MODE", _S.MONITOR, _C.SOFTWARE_CONFIG, "Skipping plugin due to a GPU being in GPU Operating Mode: LOW_DP."),
    75: DcgmErrorMeta("NO_MEMORY_CLOCKS", _S.MONITOR, _C.HARDWARE_MEMORY, "No memory clocks <= %u MHZ were found in %u supported memory clocks."),
    76: DcgmErrorMeta("NO_GRAPHICS_CLOCKS", _S.MONITOR, _C.HARDWARE_OTHER, "No graphics clocks <= %u MHZ were found in %u supported graphics clocks for memory clock %u MHZ."),
    77: DcgmErrorMeta("HAD_TO_RESTORE_STATE", _S.TRIAGE, _C.SOFTWARE_OTHER, "Had to restore GPU state on NVML GPU(s): %s"),
    78: DcgmErrorMeta("L1TAG_UNSUPPORTED", _S.CONFIG, _C.SOFTWARE_OTHER, "This card does not support the L1 cache test. Skipping test."),
    79: DcgmErrorMeta("L1TAG_MISCOMPARE", _S.ISOLATE, _C.HARDWARE_MEMORY, "Detected a miscompare failure in the L1 cache."),
    80: DcgmErrorMeta("ROW_REMAP_FAILURE", _S.RESET, _C.HARDWARE_MEMORY, "GPU %u had uncorrectable memory errors and row remapping failed."),
    81: DcgmErrorMeta("UNCONTAINED_ERROR", _S.ISOLATE, _C.SOFTWARE_XID, "GPU had an uncontained error (XID 95)"),
    82: DcgmErrorMeta("EMPTY_GPU_LIST", _S.CONFIG, _C.SOFTWARE_CONFIG, "No valid GPUs passed to plugin"),
    83: DcgmErrorMeta("DBE_PENDING_PAGE_RETIREMENTS", _S.RESET, _C.HARDWARE_MEMORY, "Pending page retirements together with a DBE were detected on GPU %u."),
    84: DcgmErrorMeta("UNCORRECTABLE_ROW_REMAP", _S.RESET, _C.HARDWARE_MEMORY, "GPU %u had uncorrectable memory errors and %u rows were remapped"),
    85: DcgmErrorMeta("PENDING_ROW_REMAP", _S.RESET, _C.HARDWARE_MEMORY, "GPU %u had memory errors and row remappings are pending"),
    86: DcgmErrorMeta("BROKEN_P2P_MEMORY_DEVICE", _S.ISOLATE, _C.HARDWARE_OTHER, "GPU %u was unsuccessfully written to by GPU %u in a peer-to-peer test: %s"),
    87: DcgmErrorMeta("BROKEN_P2P_WRITER_DEVICE", _S.ISOLATE, _C.HARDWARE_OTHER, "GPU %u unsuccessfully wrote data to GPU %u in a peer-to-peer test: %s"),
    88: DcgmErrorMeta("NVSWITCH_NVLINK_DOWN", _S.ISOLATE, _C.HARDWARE_NVLINK, "NVSwitch %u's NvLink %u is down."),
    89: DcgmErrorMeta("EUD_BINARY_PERMISSIONS", _S.TRIAGE, _C.SOFTWARE_EUD, ""),
    90: DcgmErrorMeta("EUD_NON_ROOT_USER", _S.TRIAGE, _C.SOFTWARE_EUD, ""),
    91: DcgmErrorMeta("EUD_SPAWN_FAILURE", _S.TRIAGE, _C.SOFTWARE_EUD, ""),
    92: DcgmErrorMeta("EUD_TIMEOUT", _S.TRIAGE, _C.SOFTWARE_EUD, ""),
    93: DcgmErrorMeta("EUD_ZOMBIE", _S.TRIAGE, _C.SOFTWARE_EUD, ""),
    94: DcgmErrorMeta("EUD_NON_ZERO_EXIT_CODE", _S.TRIAGE, _C.SOFTWARE_EUD, ""),
    95: DcgmErrorMeta("EUD_TEST_FAILED", _S.ISOLATE, _C.SOFTWARE_EUD, ""),
    96: DcgmErrorMeta("FILE_CREATE_PERMISSIONS", _S.CONFIG, _C.SOFTWARE_CONFIG, "The DCGM Diagnostic does not have permissions to create a file in directory '%s'"),
    97: DcgmErrorMeta("PAUSE_RESUME_FAILED", _S.TRIAGE, _C.INTERNAL_OTHER, ""),
    98: DcgmErrorMeta("PCIE_H_REPLAY_VIOLATION", _S.ISOLATE, _C.HARDWARE_PCIE, "GPU %u host-side PCIe replay violation, see dmesg for more information"),
    99: DcgmErrorMeta("GPU_EXPECTED_NVLINKS_UP", _S.TRIAGE, _C.HARDWARE_NVLINK, "Only %u NvLinks are up out of the expected %u"),
    100: DcgmErrorMeta("NVSWITCH_EXPECTED_NVLINKS_UP", _S.TRIAGE, _C.HARDWARE_NVLINK, "NvSwitch %u - Only %u NvLinks are up out of the expected %u"),
    101: DcgmErrorMeta("XID_ERROR", _S.TRIAGE, _C.SOFTWARE_XID, "Detected XID %u for GPU %u"),
    102: DcgmErrorMeta("SBE_VIOLATION", _S.ISOLATE, _C.HARDWARE_MEMORY, "Detected %ld %s for GPU %u"),
    103: DcgmErrorMeta("DBE_VIOLATION", _S.ISOLATE, _C.HARDWARE_MEMORY, "Detected %ld %s for GPU %u"),
    104: DcgmErrorMeta("PCIE_REPLAY_VIOLATION", _S.ISOLATE, _C.HARDWARE_PCIE, "Detected %ld %s for GPU %u"),
    105: DcgmErrorMeta("SBE_THRESHOLD_VIOLATION", _S.ISOLATE, _C.HARDWARE_MEMORY, "Detected %ld %s for GPU %u which is above the threshold %ld"),
    106: DcgmErrorMeta("DBE_THRESHOLD_VIOLATION", _S.ISOLATE, _C.HARDWARE_MEMORY, "Detected %ld %s for GPU %u which is above the threshold %ld"),
    107: DcgmErrorMeta("PCIE_REPLAY_THRESHOLD_VIOLATION", _S.ISOLATE, _C.HARDWARE_PCIE, "Detected %ld %s for GPU %u which is above the threshold %ld"),
    108: DcgmErrorMeta("CUDA_FM_NOT_INITIALIZED", _S.MONITOR, _C.SOFTWARE_CUDA, ""),
    109: DcgmErrorMeta("SXID_ERROR", _S.ISOLATE, _C.SOFTWARE_XID, "Detected fatal NvSwitch SXID %u"),
    110: DcgmErrorMeta("GFLOPS_THRESHOLD_VIOLATION", _S.TRIAGE, _C.PERF_VIOLATION, "Detected %.2f %s for GPU %u which is below the threshold %.2f"),
    111: DcgmErrorMeta("NAN_VALUE", _S.ISOLATE, _C.HARDWARE_MEMORY, "Found %lld NaN-value memory elements on GPU %u"),
    112: DcgmErrorMeta("FABRIC_MANAGER_TRAINING_ERROR", _S.CONFIG, _C.SOFTWARE_CUDA, "Fabric Manager (Cluster UUID: %s, Clique ID: %ld, Health Mask: %#lx): %s."),
    113: DcgmErrorMeta("BROKEN_P2P_PCIE_MEMORY_DEVICE", _S.ISOLATE, _C.HARDWARE_PCIE, "GPU %u was unsuccessfully written to by GPU %u over PCIe in a peer-to-peer test: %s"),
    114: DcgmErrorMeta("BROKEN_P2P_PCIE_WRITER_DEVICE", _S.ISOLATE, _C.HARDWARE_PCIE, "GPU %u unsuccessfully wrote data to GPU %u over PCIe in a peer-to-peer test: %s"),
    115: DcgmErrorMeta("BROKEN_P2P_NVLINK_MEMORY_DEVICE", _S.ISOLATE, _C.HARDWARE_NVLINK, "GPU %u was unsuccessfully written to by GPU %u over NVLink in a peer-to-peer test: %s"),
    116: DcgmErrorMeta("BROKEN_P2P_NVLINK_WRITER_DEVICE", _S.ISOLATE, _C.HARDWARE_NVLINK, "GPU %u unsuccessfully wrote data to GPU %u over NVLink in a peer-to-peer test: %s"),
    117: DcgmErrorMeta("TEST_SKIPPED", _S.CONFIG, _C.SOFTWARE_CONFIG, "Test %s was skipped."),
    118: DcgmErrorMeta("SRAM_THRESHOLD", _S.ISOLATE, _C.HARDWARE_MEMORY, "SRAM Threshold Count exceeded on GPU %d: %ld"),
    119: DcgmErrorMeta("NVLINK_EFFECTIVE_BER_THRESHOLD", _S.ISOLATE, _C.HARDWARE_NVLINK, "Detected effective BER %.2e exceeds minimum threshold on GPU %u's NVLink."),
    120: DcgmErrorMeta("FALLEN_OFF_BUS", _S.ISOLATE, _C.HARDWARE_OTHER, "GPU %d has fallen off the bus"),
    121: DcgmErrorMeta("NVLINK_SYMBOL_BER_THRESHOLD", _S.ISOLATE, _C.HARDWARE_NVLINK, "Detected symbol BER %.2e exceeds minimum threshold on GPU %u's NVLink."),
    122: DcgmErrorMeta("IMEX_UNHEALTHY", _S.ISOLATE, _C.SOFTWARE_OTHER, "IMEX %s status is %s (%s)"),
    123: DcgmErrorMeta("FABRIC_PROBE_STATE", _S.MONITOR, _C.HARDWARE_NVLINK, "GPU %u: Fabric State is %s (%lld)."),
    124: DcgmErrorMeta("BINARY_PERMISSIONS", _S.TRIAGE, _C.SOFTWARE_OTHER, ""),
    125: DcgmErrorMeta("GPU_RECOVERY_RESET", _S.RESET, _C.HARDWARE_OTHER, "GPU %u requires a reset to recover from a fault. Recovery action: %ld (GPU_RESET)."),
    126: DcgmErrorMeta("GPU_RECOVERY_REBOOT", _S.ISOLATE, _C.HARDWARE_OTHER, "GPU %u fault may have left the OS in an inconsistent state. Recovery action: %ld (NODE_REBOOT)."),
    127: DcgmErrorMeta("GPU_RECOVERY_DRAIN_P2P", _S.RESET, _C.HARDWARE_OTHER, "GPU %u requires peer-to-peer traffic to be quiesced. Recovery action: %ld (DRAIN_P2P)."),
    128: DcgmErrorMeta("GPU_RECOVERY_DRAIN_RESET", _S.RESET, _C.HARDWARE_OTHER, "GPU %u operating at reduced capacity due to a fault. Recovery action: %ld (DRAIN_AND_RESET)."),
    129: DcgmErrorMeta("NCCL_ERROR", _S.RESET, _C.HARDWARE_OTHER, "Detected NCCL error: %s Recovery action: %ld (DRAIN_AND_RESET)."),
    130: DcgmErrorMeta("RETEST_REQUESTED", _S.TRIAGE, _C.SOFTWARE_OTHER, ""),
    131: DcgmErrorMeta("CONTAINED_ERROR", _S.MONITOR, _C.SOFTWARE_XID, "GPU had a contained error."),
    132: DcgmErrorMeta("UNCORRECTABLE_ROW_REMAP_LIMIT", _S.TRIAGE, _C.HARDWARE_MEMORY, "GPU %u exceeded uncorrectable row remap limit with %u remapped rows"),
}
# fmt: on
"""Every id below ``DCGM_FR_ERROR_SENTINEL`` (133), as DCGM 4.6.0 defines it."""
