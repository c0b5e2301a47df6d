"""Tool outputs for the fake executables: ``nvidia-smi -q`` text and ``dcgmi health -c -j`` JSON.

Shapes follow the real tools (see gpu_remediation/tool_outputs/ for the DCGM JSON
and tests/activities/fixtures/README.md for where it comes from).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from tests.agent.lines import BUSES

_GPU_SECTION = """GPU 0000{bus}.0
    Product Name                          : NVIDIA H100 80GB HBM3
    Product Brand                         : NVIDIA
    Display Mode                          : Disabled
    Persistence Mode                      : Enabled
    MIG Mode
        Current                           : Disabled
        Pending                           : Disabled
    Serial Number                         : 165322{index:06d}
    GPU UUID                              : GPU-6c9d5ff0-1bde-4d6c-9c4f-1e2f3a4b5c{index:02d}
    Minor Number                          : {index}
    GPU Recovery Action                   : {recovery}
    PCI
        Bus                               : 0x{bus_byte}
        Device                            : 0x00
        Domain                            : 0x0000
        Bus Id                            : 0000{bus}.0
    ECC Mode
        Current                           : Enabled
        Pending                           : Enabled
    ECC Errors
        Volatile
            SRAM Correctable              : 0
            SRAM Uncorrectable            : 0
            DRAM Correctable              : 0
            DRAM Uncorrectable            : 0
    Retired Pages
        Single Bit ECC                    : N/A
        Double Bit ECC                    : N/A
        Pending Page Blacklist            : N/A
    Remapped Rows
        Correctable Error                 : 0
        Uncorrectable Error               : {uncorrectable}
        Pending                           : {pending}
        Remapping Failure Occurred        : {failure}
        Bank Remap Availability Histogram
            Max                           : 2560 bank(s)
            High                          : 0 bank(s)
            Partial                       : 0 bank(s)
            Low                           : 0 bank(s)
            None                          : 0 bank(s)
    Temperature
        GPU Current Temp                  : 33 C
        GPU Shutdown Temp                 : 92 C
        Memory Current Temp               : 41 C
    Pending                               : No
"""


def smi_output(
    buses: Iterable[str] = BUSES,
    *,
    recovery: Mapping[str, str] | None = None,
    pending: Iterable[str] = (),
    failure: Iterable[str] = (),
    lost: Mapping[str, str] | None = None,
) -> str:
    """``nvidia-smi -q`` for GPUs on ``buses`` (``0000:53:00`` form).

    ``recovery`` maps a bus to its ``GPU Recovery Action`` word; ``pending`` /
    ``failure`` set the row-remapper flags; ``lost`` prints the error line a
    GPU that fell off the bus produces instead of its section.
    """
    recovery, lost = recovery or {}, lost or {}
    pending, failure = set(pending), set(failure)
    present = [b for b in buses if b not in lost]
    lines = [
        "==============NVSMI LOG==============",
        "",
        "Timestamp                                 : Tue Dec  2 10:00:00 2026",
        "Driver Version                            : 550.54.15",
        "CUDA Version                              : 12.4",
        "",
        f"Attached GPUs                             : {len(present) + len(lost)}",
    ]
    head = [
        f"Unable to determine the device handle for GPU0000{b}.0: {why}" for b, why in lost.items()
    ]
    sections = [
        _GPU_SECTION.format(
            bus=bus,
            bus_byte=bus[5:7],
            index=i,
            recovery=recovery.get(bus, "None"),
            pending="Yes" if bus in pending else "No",
            failure="Yes" if bus in failure else "No",
            uncorrectable=1 if bus in pending else 0,
        )
        for i, bus in enumerate(present)
    ]
    return "\n".join(head + lines) + "\n" + "\n".join(sections)


def health_json(failures: Mapping[int, tuple[str, str, str]] | None = None) -> str:
    """``dcgmi health -c -j``; ``failures`` maps a GPU id to (system, value, message)."""
    failures = failures or {}
    body: dict[str, object] = {
        "Overall Health": {
            "value": "Failure"
            if any(v == "Failure" for _, v, _ in failures.values())
            else ("Warning" if failures else "Healthy")
        }
    }
    if failures:
        body["GPU"] = {
            "children": {
                str(gpu): {
                    "value": value,
                    "children": {
                        "Errors": {
                            "children": {
                                f"{system} system": {"value": value, "overflow": [message]}
                            }
                        }
                    },
                }
                for gpu, (system, value, message) in failures.items()
            }
        }
    return json.dumps({"body": body, "header": ["Health Monitor Report"]}, indent=3)


ROW_REMAP_PENDING_GPU2 = health_json(
    {2: ("Memory", "Failure", "GPU 2 had memory errors and row remappings are pending")}
)
FI_INFO_EFA = """provider: efa
    fabric: efa
    domain: rdmap79s0-rdm
    version: 122.0
    type: FI_EP_RDM
    protocol: FI_PROTO_EFA
"""
