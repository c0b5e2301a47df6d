"""NVIDIA's Xid catalog as data: every live Xid with NVIDIA's immediate and investigatory action.

Source: NVIDIA's "Analyzing Xid Errors with the Xid Catalog"
(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), whose
workbook Xid-Catalog.xlsx has the sheets "Xids" (one row per code: Resolution
Bucket, Immediate and Investigatory Action, Trigger Conditions), "Xid 144-150
Decode" and "Resolution Buckets" (what each bucket asks for). The rows below are
copied from leptonai/gpud @ 4a8de33a
(components/accelerator/nvidia/xid/catalog_generated.go, generated 2025-10-29
from that page) and were checked cell by cell against the workbook itself, as
NVIDIA/NVSentinel embeds it unmodified
(health-monitors/syslog-health-monitor/pkg/common/Xid-Catalog.xlsx, SHA-256
``XID_CATALOG_WORKBOOK_SHA256``): the immediate and investigatory actions of
every live code agree. The tests hold the workbook's sheets as text
(tests/gpu_remediation/fixtures/real/nvidia_xid_catalog_workbook_xids.tsv,
nvidia_xid_144_150_decode.tsv) and check the copy and the citations against them.

Codes NVIDIA lists as "Unused" are left out; 162-172 are new codes for which the
catalog gives no action yet. ``catalog.XID_TABLE`` derives the project's class of
every code here from its immediate action, except where its own rows decide
(tests/gpu_remediation/test_xid_catalog.py checks that no live code is missing,
and that every row cites its source with one of the ``SOURCE_*`` labels below).

Nothing here does I/O: the module is imported by workflow code.
"""

# ruff: noqa: E501  (one row per Xid, as in NVIDIA's sheet)

from __future__ import annotations

from typing import NamedTuple

XID_CATALOG_VERSION = (
    "NVIDIA Xid catalog (Xid-Catalog.xlsx, sheet Xids) as of 2025-10-29"
    " (via leptonai/gpud @ 4a8de33a, checked against the workbook)"
)
XID_CATALOG_WORKBOOK_SHA256 = "7f70ce9684be0c9d98a367770341ccc1d8bca4465cebe42dab7e23d57df5d5a5"
"""The Xid-Catalog.xlsx the rows were checked against (NVSentinel's pkg/common/common.go cites it)."""
XID_CATALOG_HIGHEST_CODE = 172
"""The highest code the catalog lists (live or unused)."""

# Citations of the catalog's cells, for the ``source`` of each row of
# ``catalog.XID_TABLE``: the label, ": ", then what the cell says (labels hold no ": ").
SOURCE_IMMEDIATE = "NVIDIA Xid catalog, sheet Xids, Immediate Action"
"""Followed by NVIDIA's immediate-action bucket of the code, verbatim (``none`` when empty)."""
SOURCE_BUCKETS = "NVIDIA Xid catalog, sheet Resolution Buckets"
"""What a ``WORKFLOW_*`` / ``XID_*`` bucket resolves to, from the bucket's own definition."""
SOURCE_NVLINK5_DECODE = "NVIDIA Xid catalog, sheet Xid 144-150 Decode"
"""Xids 144-150: the per-unit decode of the line's severity and error status."""
SOURCE_TRIGGER = "NVIDIA Xid catalog, sheet Xids, Trigger Conditions"
"""The code's Trigger Conditions note, quoted (what NVIDIA says beyond the bucket)."""
SOURCE_DESCRIPTION = "NVIDIA Xid catalog, sheet Xids, Description"
"""The code's description, quoted (for codes whose action columns are empty)."""
SOURCE_PROJECT = "project"
"""A deliberate departure from, or addition to, the catalog; the reason follows."""
SOURCES = (
    SOURCE_IMMEDIATE,
    SOURCE_BUCKETS,
    SOURCE_NVLINK5_DECODE,
    SOURCE_TRIGGER,
    SOURCE_DESCRIPTION,
    SOURCE_PROJECT,
)


class NvidiaXid(NamedTuple):
    """One live row of NVIDIA's catalog."""

    mnemonic: str
    description: str
    immediate: str  # NVIDIA's immediate resolution ("" when the catalog gives none)
    investigatory: str


# fmt: off
NVIDIA_XID_CATALOG: dict[int, NvidiaXid] = {
    8: NvidiaXid('ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT', 'GPU stopped processing', 'RESTART_APP', 'CONTACT_SUPPORT'),
    11: NvidiaXid('ROBUST_CHANNEL_GR_ERROR_MISSING_HW', 'Invalid or corrupted push buffer stream', 'RESTART_APP', 'CHECK_APP/CUDA'),
    13: NvidiaXid('ROBUST_CHANNEL_GR_EXCEPTION / / ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY', 'Graphics Engine Exception', 'RESTART_APP', 'WORKFLOW_XID_13'),
    25: NvidiaXid('ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY', 'Invalid or illegal push buffer stream', 'RESTART_APP', 'CHECK_APP/CUDA'),
    31: NvidiaXid('ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT', 'GPU memory page fault', 'RESTART_APP', 'WORKFLOW_XID_31'),
    32: NvidiaXid('ROBUST_CHANNEL_PBDMA_ERROR', 'Invalid or corrupted push buffer stream', 'RESTART_APP', 'CHECK_APP/CUDA'),
    37: NvidiaXid('ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD', 'Driver firmware error', 'IGNORE', 'CHECK_APP/CUDA'),
    38: NvidiaXid('ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT', 'Driver firmware error', 'IGNORE', 'CONTACT_SUPPORT'),
    39: NvidiaXid('ROBUST_CHANNEL_CE0_ERROR', 'Copy Engine Exception', 'RESTART_APP', 'CONTACT_SUPPORT'),
    40: NvidiaXid('ROBUST_CHANNEL_CE1_ERROR', 'Copy Engine Exception', 'RESTART_APP', 'CONTACT_SUPPORT'),
    41: NvidiaXid('ROBUST_CHANNEL_CE2_ERROR', 'Copy Engine Exception', 'RESTART_APP', 'CONTACT_SUPPORT'),
    43: NvidiaXid('ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR', 'GPU stopped processing', 'IGNORE', 'CONTACT_SUPPORT'),
    44: NvidiaXid('ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW', 'Graphics Engine fault during context switch', 'IGNORE', 'CONTACT_SUPPORT'),
    45: NvidiaXid('ROBUST_CHANNEL_PREEMPTIVE_REMOVAL', 'Preemptive cleanup, due to previous errors -- Most likely to see when running multiple cuda applications and hitting a DBE', 'WORKFLOW_XID_45', 'Solo: RESTART_FM / Not Solo: IGNORE (follow other Xid)'),
    46: NvidiaXid('ROBUST_CHANNEL_GPU_TIMEOUT_ERROR', 'GPU stopped processing', 'RESET_GPU', 'CONTACT_SUPPORT'),
    48: NvidiaXid('ROBUST_CHANNEL_GPU_ECC_DBE', 'Double Bit ECC Error', 'WORKFLOW_XID_48', 'WORKFLOW_XID_48'),
    54: NvidiaXid('SILENT_RUNNING_PWR_REDUCED_CLOCKING', 'Auxiliary power is not connected to the GPU board', 'CHECK_MECHANICALS', 'CONTACT_SUPPORT'),
    60: NvidiaXid('ROBUST_CHANNEL_SEC2_ERROR', 'Video processor exception', 'RESTART_APP', 'INVESTIGATE_SW'),
    62: NvidiaXid('PMU_HALT_ERROR', 'Internal micro-controller halt / (newer drivers)', 'RESET_GPU', 'CONTACT_SUPPORT'),
    63: NvidiaXid('INFOROM_DRAM_RETIREMENT_EVENT', 'GPU memory remapping event', 'IGNORE', 'IGNORE'),
    64: NvidiaXid('INFOROM_DRAM_RETIREMENT_FAILURE', 'GPU memory remapping failure', 'RESET_GPU', 'CONTACT_SUPPORT'),
    66: NvidiaXid('ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION', 'Illegal access by driver', 'IGNORE', 'INVESTIGATE_SW'),
    67: NvidiaXid('ROBUST_CHANNEL_FECS_ERR_VERIF_VIOLATION', 'Illegal access by driver', 'IGNORE', 'CONTACT_SUPPORT'),
    68: NvidiaXid('ROBUST_CHANNEL_NVDEC0_ERROR', 'NVDEC0 Exception', 'RESTART_APP', 'CONTACT_SUPPORT'),
    69: NvidiaXid('ROBUST_CHANNEL_GR_CLASS_ERROR', 'Graphics Engine class error', 'RESTART_APP', 'CHECK_APP/CUDA'),
    70: NvidiaXid('ROBUST_CHANNEL_CE3_ERROR', 'CE3: Unknown Error', 'RESTART_APP', 'CONTACT_SUPPORT'),
    71: NvidiaXid('ROBUST_CHANNEL_CE4_ERROR', 'CE4: Unknown Error', 'RESTART_APP', 'CONTACT_SUPPORT'),
    72: NvidiaXid('ROBUST_CHANNEL_CE5_ERROR', 'CE5: Unknown Error', 'RESTART_APP', 'CONTACT_SUPPORT'),
    74: NvidiaXid('NVLINK_ERROR', 'NVLINK Error', 'WORKFLOW_NVLINK_ERR', 'CONTACT_SUPPORT'),
    75: NvidiaXid('ROBUST_CHANNEL_CE6_ERROR', 'CE6: Unknown Error', 'RESTART_APP', 'CONTACT_SUPPORT'),
    76: NvidiaXid('ROBUST_CHANNEL_CE7_ERROR', 'CE7: Unknown Error', 'RESTART_APP', 'CONTACT_SUPPORT'),
    77: NvidiaXid('ROBUST_CHANNEL_CE8_ERROR', 'CE8: Unknown Error', 'RESTART_APP', 'CONTACT_SUPPORT'),
    78: NvidiaXid('VGPU_START_ERROR', 'vGPU Start Error', 'UPDATE_SWFW', 'UPDATE_SWFW'),
    79: NvidiaXid('ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS', 'GPU has fallen off the bus', 'RESTART_BM', 'CONTACT_SUPPORT'),
    80: NvidiaXid('PBDMA_PUSHBUFFER_CRC_MISMATCH', 'Corrupted data sent to GPU', 'RESTART_APP', 'CHECK_APP/CUDA'),
    82: NvidiaXid('ROBUST_CHANNEL_NVJPG0_ERROR', 'NVJPG0 Error', 'RESTART_APP', 'CONTACT_SUPPORT'),
    83: NvidiaXid('ROBUST_CHANNEL_NVDEC1_ERROR', 'NVDEC1 Error', 'RESTART_APP', 'CONTACT_SUPPORT'),
    84: NvidiaXid('ROBUST_CHANNEL_NVDEC2_ERROR', 'NVDEC2 Error', 'RESTART_APP', 'CONTACT_SUPPORT'),
    85: NvidiaXid('ROBUST_CHANNEL_CE9_ERROR', 'CE9: Unknown Error', 'RESTART_APP', 'CONTACT_SUPPORT'),
    86: NvidiaXid('ROBUST_CHANNEL_OFA0_ERROR', 'OFA Exception', 'RESTART_APP', 'CONTACT_SUPPORT'),
    88: NvidiaXid('ROBUST_CHANNEL_NVDEC3_ERROR', 'NVDEC3 Error', 'RESTART_APP', 'CONTACT_SUPPORT'),
    89: NvidiaXid('ROBUST_CHANNEL_NVDEC4_ERROR', 'NVDEC4 Error', 'RESTART_APP', 'CONTACT_SUPPORT'),
    92: NvidiaXid('EXCESSIVE_SBE_INTERRUPTS', 'High single-bit ECC error rate', 'IGNORE', 'CONTACT_SUPPORT'),
    93: NvidiaXid('INFOROM_ERASE_LIMIT_EXCEEDED', 'Non-fatal violation of provisioned InfoROM wear limit', 'IGNORE', 'CONTACT_SUPPORT'),
    94: NvidiaXid('ROBUST_CHANNEL_CONTAINED_ERROR', 'Contained memory error', 'RESTART_APP', 'IGNORE (sympathetic)'),
    95: NvidiaXid('ROBUST_CHANNEL_UNCONTAINED_ERROR', 'Uncontained memory error', 'RESET_GPU', 'IGNORE (sympathetic)'),
    96: NvidiaXid('ROBUST_CHANNEL_NVDEC5_ERROR', 'NVDEC5 Error', 'RESTART_APP', 'CONTACT_SUPPORT'),
    97: NvidiaXid('ROBUST_CHANNEL_NVDEC6_ERROR', 'NVDEC6 Error', 'RESTART_APP', 'CONTACT_SUPPORT'),
    98: NvidiaXid('ROBUST_CHANNEL_NVDEC7_ERROR', 'NVDEC7 Error', 'RESTART_APP', 'CONTACT_SUPPORT'),
    99: NvidiaXid('ROBUST_CHANNEL_NVJPG1_ERROR', 'NVJPG1 Error', 'RESTART_APP', 'CONTACT_SUPPORT'),
    100: NvidiaXid('ROBUST_CHANNEL_NVJPG2_ERROR', 'NVJPG2 Error', 'RESTART_APP', 'CONTACT_SUPPORT'),
    101: NvidiaXid('ROBUST_CHANNEL_NVJPG3_ERROR', 'NVJPG3 Error', 'RESTART_APP', 'CONTACT_SUPPORT'),
    102: NvidiaXid('ROBUST_CHANNEL_NVJPG4_ERROR', 'NVJPG4 Error', 'RESTART_APP', 'CONTACT_SUPPORT'),
    103: NvidiaXid('ROBUST_CHANNEL_NVJPG5_ERROR', 'NVJPG5 Error', 'RESTART_APP', 'CONTACT_SUPPORT'),
    104: NvidiaXid('ROBUST_CHANNEL_NVJPG6_ERROR', 'NVJPG6 Error', 'RESTART_APP', 'CONTACT_SUPPORT'),
    105: NvidiaXid('ROBUST_CHANNEL_NVJPG7_ERROR', 'NVJPG7 Error', 'RESTART_APP', 'CONTACT_SUPPORT'),
    106: NvidiaXid('SMBPBI_TEST_MESSAGE', 'SMBPBI Test Message', 'IGNORE', 'IGNORE'),
    107: NvidiaXid('SMBPBI_TEST_MESSAGE_SILENT', 'SMBPBI Test Message Silent', 'IGNORE', 'IGNORE'),
    109: NvidiaXid('ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR', 'Context Switch Timeout Error', 'RESET_GPU', 'CONTACT_SUPPORT'),
    110: NvidiaXid('SEC_FAULT_ERROR', 'Security Fault Error', 'RESET_GPU', 'INVESTIGATE_SW'),
    119: NvidiaXid('GSP_RPC_TIMEOUT', 'GSP RPC Timeout', 'RESET_GPU', 'INVESTIGATE_SW'),
    120: NvidiaXid('GSP_ERROR', 'GSP Error', 'RESET_GPU', 'INVESTIGATE_SW'),
    121: NvidiaXid('C2C_ERROR', 'C2C Error', 'IGNORE', 'CONTACT_SUPPORT'),
    126: NvidiaXid('ROBUST_CHANNEL_CE10_ERROR', 'CE10: Unknown Error', 'RESTART_APP', 'CONTACT_SUPPORT'),
    127: NvidiaXid('ROBUST_CHANNEL_CE11_ERROR', 'CE11: Unknown Error', 'RESTART_APP', 'CONTACT_SUPPORT'),
    128: NvidiaXid('ROBUST_CHANNEL_CE12_ERROR', 'CE12: Unknown Error', 'RESTART_APP', 'CONTACT_SUPPORT'),
    129: NvidiaXid('ROBUST_CHANNEL_CE13_ERROR', 'CE13: Unknown Error', 'RESTART_APP', 'CONTACT_SUPPORT'),
    130: NvidiaXid('ROBUST_CHANNEL_CE14_ERROR', 'CE14: Unknown Error', 'RESTART_APP', 'CONTACT_SUPPORT'),
    131: NvidiaXid('ROBUST_CHANNEL_CE15_ERROR', 'CE15: Unknown Error', 'RESTART_APP', 'CONTACT_SUPPORT'),
    132: NvidiaXid('ROBUST_CHANNEL_CE16_ERROR', 'CE16: Unknown Error', 'RESTART_APP', 'CONTACT_SUPPORT'),
    133: NvidiaXid('ROBUST_CHANNEL_CE17_ERROR', 'CE17: Unknown Error', 'RESTART_APP', 'CONTACT_SUPPORT'),
    134: NvidiaXid('ROBUST_CHANNEL_CE18_ERROR', 'CE18: Unknown Error', 'RESTART_APP', 'CONTACT_SUPPORT'),
    135: NvidiaXid('ROBUST_CHANNEL_CE19_ERROR', 'CE19: Unknown Error', 'RESTART_APP', 'CONTACT_SUPPORT'),
    136: NvidiaXid('ALI_TRAINING_FAIL', 'Link Training Failed', 'RESET_GPU', 'INVESTIGATE_LINK_SI'),
    137: NvidiaXid('NVLINK_PRIV_ERR', 'NVLink Privilege Error', 'IGNORE', 'XID_137_FLOW'),
    139: NvidiaXid('ROBUST_CHANNEL_OFA1_ERROR', 'OFA1 Error', 'RESTART_APP', 'CONTACT_SUPPORT'),
    140: NvidiaXid('UNRECOVERABLE_ECC_ERROR_ESCAPE', 'ECC Unrecovered Error', 'RESET_GPU', 'CONTACT_SUPPORT'),
    141: NvidiaXid('ROBUST_CHANNEL_FAST_PATH_ERROR', 'CUDA Fast Path Error', 'IGNORE', 'CONTACT_SUPPORT'),
    142: NvidiaXid('ROBUST_CHANNEL_NVENC3_ERROR', 'NVENC3 Error', 'CONTACT_SUPPORT', ''),
    143: NvidiaXid('GPU_INIT_ERROR', 'GPU Initialization Error', 'RESET_GPU', 'CONTACT_SUPPORT'),
    144: NvidiaXid('NVLINK_SAW_ERROR', 'NVLINK: SAW Error', 'WORKFLOW_NVLINK5_ERR', 'WORKFLOW_NVLINK5_ERR'),
    145: NvidiaXid('NVLINK_RLW_ERROR', 'NVLINK: RLW Error', 'WORKFLOW_NVLINK5_ERR', 'WORKFLOW_NVLINK5_ERR'),
    146: NvidiaXid('NVLINK_TLW_ERROR', 'NVLINK: TLW Error', 'WORKFLOW_NVLINK5_ERR', 'WORKFLOW_NVLINK5_ERR'),
    147: NvidiaXid('NVLINK_TREX_ERROR', 'NVLINK: TREX Error', 'WORKFLOW_NVLINK5_ERR', 'WORKFLOW_NVLINK5_ERR'),
    148: NvidiaXid('NVLINK_NVLPW_CTRL_ERROR', 'NVLINK: NVLPW_CTRL Error', 'WORKFLOW_NVLINK5_ERR', 'WORKFLOW_NVLINK5_ERR'),
    149: NvidiaXid('NVLINK_NETIR_ERROR', 'NVLINK: NETIR Error', 'WORKFLOW_NVLINK5_ERR', 'WORKFLOW_NVLINK5_ERR'),
    150: NvidiaXid('NVLINK_MSE_ERROR', 'NVLINK: MSE Error', 'WORKFLOW_NVLINK5_ERR', 'WORKFLOW_NVLINK5_ERR'),
    151: NvidiaXid('ROBUST_CHANNEL_KEY_ROTATION_ERROR', 'Key rotation Error', 'RESTART_VM', 'CONTACT_SUPPORT'),
    152: NvidiaXid('ROBUST_CHANNEL_DLA_SMMU_ERROR', 'DLA SMMU Error', 'IGNORE', 'CONTACT_SUPPORT'),
    153: NvidiaXid('ROBUST_CHANNEL_DLA_TIMEOUT', 'DLA timeout Error', 'IGNORE', 'CONTACT_SUPPORT'),
    154: NvidiaXid('GPU_RECOVERY_ACTION_CHANGED', 'GPU Recovery Action Changed', 'XID_154', 'N/A Informational only regarding another Xid'),
    155: NvidiaXid('NVLINK_SW_DEFINED_ERROR', 'NVLINK: SW Defined Error', 'RESET_GPU', 'INVESTIGATE_SW_USER'),
    156: NvidiaXid('RESOURCE_RETIREMENT_EVENT', 'Resource Retirement Event', 'RESET_GPU', 'IGNORE'),
    157: NvidiaXid('RESOURCE_RETIREMENT_FAILURE', 'Resource Retirement Failure', 'IGNORE', 'CONTACT_SUPPORT'),
    158: NvidiaXid('GPU_FATAL_TIMEOUT', 'GPU Fatal Timeout', 'RESET_GPU', 'CONTACT_SUPPORT'),
    159: NvidiaXid('ROBUST_CHANNEL_CHI_NON_DATA_ERROR', 'CHI Non-Data Error', 'CHECK_UVM', 'SYMPATHETIC_REPORT_SOLO'),
    160: NvidiaXid('CHANNEL_RETIREMENT_EVENT', 'Channel Retirement Event', 'IGNORE', 'INVESTIGATE_SW'),
    161: NvidiaXid('CHANNEL_RETIREMENT_FAILURE', 'Channel Retirement Failure', 'IGNORE', 'INVESTIGATE_SW'),
    162: NvidiaXid('PSHC_REENGAGED', 'Power Smoothing HW Circuitry capability reengaged', '', ''),
    163: NvidiaXid('PSHC_DISENGAGED', 'Power Smoothing HW Circuitry capability disengaged', '', ''),
    164: NvidiaXid('PSHC_LOW_LIFETIME', 'Power Smoothing HW Circuitry low lifetime reached', '', ''),
    165: NvidiaXid('PSHC_ZERO_LIFETIME', 'Power Smoothing HW Circuitry lifetime exhausted', '', ''),
    166: NvidiaXid('NVLINK_SECURE_CRYPTO_ERR', 'CC traffic seen prior to link properly being configured for encrypted traffic', '', ''),
    167: NvidiaXid('PCIE_FATAL_TIMEOUT', 'PCIE_FATAL_TIMEOUT', '', ''),
    168: NvidiaXid('REDUCED_GPU_MEMORY_CAPACITY', 'Errors found in WPR (write protected region)', '', ''),
    169: NvidiaXid('SEC2_HALT_ERROR', 'Internal micro-controller halt', '', ''),
    170: NvidiaXid('NVLINK_SECURE_OTHER', 'Interrupt seen in CC mode', '', ''),
    171: NvidiaXid('UNCORRECTABLE_DRAM_ERROR', 'Additional to Xid 48 providing more details on particulars of fault to differentiate DRAM/SRAM', '', ''),
    172: NvidiaXid('UNCORRECTABLE_SRAM_ERROR', 'Additional to Xid 48 providing more details on particulars of fault to differentiate DRAM/SRAM', '', ''),
}
# fmt: on
