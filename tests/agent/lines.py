"""Kernel-log lines written from the formats in the GPU fault reference (section 3).

Xid lines: ``NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, %s`` with the MIG
variants ``(PCI:... GPU-I:%02u)`` and ``(PCI:... GPU-I:%02u GPU-CI:%02u)``; ``pid=``,
``name=`` and ``Ch <hex>`` optional, pid ``'<unknown>'``, the bus as ``0000:b3:00.0``;
the ``GPU at PCI`` line before a GPU's first Xid; the three-line fallen-off-the-bus
banner; NVSwitch SXid lines. Each source adds its own prefix.
"""

from __future__ import annotations

from typing import NamedTuple

# GPUs of the test node, in bus order (NVML's index order).
BUSES = [
    "0000:18:00",
    "0000:3b:00",
    "0000:53:00",
    "0000:9a:00",
    "0000:b3:00",
    "0000:bb:00",
    "0000:cb:00",
    "0000:db:00",
]
INDEX = {bus: i for i, bus in enumerate(BUSES)}


class Expected(NamedTuple):
    """What one line must produce: (xid, bus, MIG GI, MIG CI, recovery action) or nothing."""

    xid: int
    bus: str
    gi: int | None = None
    ci: int | None = None
    action: int | None = None


XID_LINES: list[tuple[str, Expected]] = [
    (
        "NVRM: Xid (PCI:0000:53:00): 79, pid=1234, name=python3, GPU has fallen off the bus.",
        Expected(79, "0000:53:00"),
    ),
    (
        "NVRM: Xid (PCI:0000:18:00 GPU-I:01): 13, pid=4321, name=train, Graphics SM Warp "
        "Exception on (GPC 1, TPC 0, SM 0): Out Of Range Address",
        Expected(13, "0000:18:00", gi=1),
    ),
    (
        "NVRM: Xid (PCI:0000:18:00 GPU-I:02 GPU-CI:00): 31, pid=4321, name=train, Ch 00000010, "
        "intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f_12340000",
        Expected(31, "0000:18:00", gi=2, ci=0),
    ),
    (
        "NVRM: Xid (PCI:0000:b3:00): 48, An uncorrectable double bit error (DBE) has been "
        "detected on GPU in the framebuffer at partition 6, subpartition 0.",
        Expected(48, "0000:b3:00"),
    ),
    (
        "NVRM: Xid (PCI:0000:9a:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row "
        "marked for remapping, reset gpu to activate.",
        Expected(63, "0000:9a:00"),
    ),
    (
        "NVRM: Xid (PCI:0000:b3:00.0): 94, pid=777, name=python, Ch 00000008, Contained: CE User "
        "Channel (0x9). RST: No, D-RST: No",
        Expected(94, "0000:b3:00"),
    ),
    (
        "NVRM: Xid (PCI:0000:bb:00): 95, pid=778, name=python, Uncontained: FBHUB. RST: Yes, "
        "D-RST: No",
        Expected(95, "0000:bb:00", action=1),
    ),
    (
        "NVRM: Xid (PCI:0000:cb:00): 94, pid=779, name=python, Contained: SM (0x1). RST: No, "
        "D-RST: Yes",
        Expected(94, "0000:cb:00", action=4),
    ),
    (
        "NVRM: Xid (PCI:0000:3b:00): 119, pid=999, name=nvidia-smi, Timeout after 6s of waiting "
        "for RPC response from GPU1 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20802a02 0x8).",
        Expected(119, "0000:3b:00"),
    ),
    (
        "NVRM: Xid (PCI:0000:db:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 "
        "(Node Reboot Required)",
        Expected(154, "0000:db:00", action=2),
    ),
]

GPU_AT_LINE = "NVRM: GPU at PCI:0000:53:00: GPU-6c9d5ff0-1bde-4d6c-9c4f-1e2f3a4b5c6d"
BANNER = [
    "NVRM: The NVIDIA GPU 0000:cb:00.0",
    "NVRM: (PCI ID: 10de:2330) installed in this system has",
    "NVRM: fallen off the bus and is not responding to commands.",
]
GPU_OFF_BUS_LINE = "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus."
SXID_FATAL = (
    "nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 12028, Fatal, Link 33 egress non-posted PRIV error"
)
SXID_NON_FATAL = (
    "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Non-fatal, Link 12 LTSSM Fault Up"
)
NOISE = [
    "eth0: renamed from veth1234",
    "EXT4-fs (nvme0n1p1): mounted filesystem with ordered data mode. Quota mode: none.",
    "IPv4: martian source 10.0.0.1 from 10.0.0.2, on dev eth0",
    "nvidia-nvswitch0: link training complete",
    "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15",
]

# Prefixes each source puts before the message.
PREFIXES = {
    "syslog": "Dec  2 10:11:12 ip-10-0-1-2 kernel: [ 1234.567890] ",
    "syslog-iso": "2026-12-02T10:11:12.123456+00:00 ip-10-0-1-2 kernel: ",
    "dmesg": "[ 1234.567890] ",
    "journal": "[ 1234.567890] ip-10-0-1-2 kernel: ",
}


def syslog(message: str, prefix: str = "syslog") -> str:
    """One syslog line (with its newline)."""
    return PREFIXES[prefix] + message + "\n"


def kmsg(seq: int, message: str, priority: int = 4) -> str:
    """One /dev/kmsg record: ``priority,seq,usec,flags;message`` plus a dictionary line."""
    return f"{priority},{seq},{seq * 1000},-;{message}\n SUBSYSTEM=pci\n"


BOOT_LINE = "Linux version 6.1.0-27-cloud-amd64 (debian-kernel@lists.debian.org) #1 SMP"
