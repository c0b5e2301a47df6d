"""What the simulated host prints: ``dcgmi diag -j``, ``dcgmi health -c -j``, ``nvidia-smi -r``.

Shapes are those of DCGM 4.x and nvidia-smi, as the project's parsers
(``gpu_remediation/tool_outputs/``) read them and as their fixtures in
``tests/activities/fixtures`` show. Pure functions of a node's true state.
"""

from __future__ import annotations

import json
from typing import Any

from simulator.fleet.faults import DiagTest, FaultKind
from simulator.fleet.model import ActiveFault, NodeState, pci_bus

DCGM_VERSION = "4.2.3"
DRIVER_VERSION = "570.148.08"
EXIT_DIAG_FAILED = 226  # DCGM_ST_NVVS_ERROR as the shell sees it
# DCGM error categories (dcgm_errors.h): 10 hardware memory, 6 PCIe, 7 NVLink, 1 other.
_CATEGORY = {"memory": 10, "pcie": 6, "software": 1, "targeted_stress": 1}
_TESTS: tuple[tuple[str, DiagTest, int], ...] = (
    # (category, test, lowest level that runs it)
    ("Deployment", "software", 1),
    ("Hardware", "memory", 2),
    ("Integration", "pcie", 2),
    # Level 3's targeted stress (NVIDIA, "Targeted Stress Plugin", DCGM docs): a GPU
    # that cannot reach its performance target fails it with DCGM_FR_STRESS_LEVEL.
    ("Stress", "targeted_stress", 3),
)
STRESS_LEVEL_ERROR = 50  # DCGM_FR_STRESS_LEVEL, severity TRIAGE, category PERF_THRESHOLD
STRESS_TARGET = 8000.0
"""The targeted stress target in GFLOPS the simulated diagnostic prints (an illustrative
value: DCGM takes it from the GPU's SKU file)."""


def _dump(document: dict[str, Any]) -> str:
    # jsoncpp's styled output, as dcgmi writes it: 3-space indent, sorted keys.
    return json.dumps(document, indent=3, sort_keys=True, separators=(",", " : "))


def _test_of(fault: ActiveFault, level: int) -> DiagTest:
    # Level 1 runs only the software checks, which already see pending/failed
    # remaps, lost GPUs and driver state; the specific tests run from level 2.
    return fault.info.diag_test if level >= 2 else "software"


def _warning(fault: ActiveFault, node: NodeState) -> dict[str, Any]:
    info = fault.info
    gpu = fault.gpu if fault.gpu is not None else 0
    return {
        "error_category": _CATEGORY[info.diag_test],
        "error_id": info.dcgm_error,
        "error_severity": info.dcgm_severity,
        "warning": info.health_message.format(gpu=gpu, bus=pci_bus(gpu)),
    }


def _too_slow(fault: ActiveFault) -> dict[str, Any]:
    gpu = fault.gpu if fault.gpu is not None else 0
    reached = STRESS_TARGET / fault.info.slowdown
    return {
        "error_category": _CATEGORY["targeted_stress"],
        "error_id": STRESS_LEVEL_ERROR,
        "error_severity": 4,  # TRIAGE
        "warning": (
            f"Max stress level of {reached:.1f} did not reach desired stress level of "
            f"{STRESS_TARGET:.1f} for GPU {gpu}"
        ),
    }


def diag_output(node: NodeState, level: int, gpus: list[int]) -> tuple[int, str]:
    """``dcgmi diag -r level -j [-i gpus]`` on ``node``: (exit code, JSON).

    Each GPU fails the test that catches its fault, with DCGM's error id,
    severity and message; everything else passes.
    """
    indices = sorted(set(gpus)) if gpus else list(range(node.gpus))
    categories: list[dict[str, Any]] = []
    failed = False
    for category, test, lowest in _TESTS:
        if level < lowest:
            continue
        results = []
        test_failed = False
        for gpu in indices:
            result: dict[str, Any] = {
                "entity_group": "GPU",
                "entity_group_id": 1,
                "entity_id": gpu,
                "status": "Pass",
            }
            warnings = [
                _warning(f, node)
                for f in node.hardware_faults_on(gpu)
                if _test_of(f, level) == test
            ]
            if test == "targeted_stress":
                # A GPU that works, slower: only the level-3 performance test sees it.
                warnings += [_too_slow(f) for f in node.gpu_faults(gpu) if f.info.degrades]
            if warnings:
                result["status"] = "Fail"
                result["warnings"] = warnings
                test_failed = True
            results.append(result)
        failed = failed or test_failed
        categories.append(
            {
                "category": category,
                "tests": [
                    {
                        "name": test,
                        "results": results,
                        "test_summary": {"status": "Fail" if test_failed else "Pass"},
                    }
                ],
            }
        )
    document = {
        "DCGM Diagnostic": {"test_categories": categories},
        "entity_groups": [
            {
                "entities": [
                    {"device_id": "2330", "entity_id": gpu, "serial_num": _serial(node, gpu)}
                    for gpu in indices
                ],
                "entity_group": "GPU",
                "entity_group_id": 1,
            }
        ],
        "metadata": {"Driver Version Detected": DRIVER_VERSION, "version": DCGM_VERSION},
    }
    return (EXIT_DIAG_FAILED if failed else 0), _dump(document)


def _serial(node: NodeState, gpu: int) -> str:
    digits = "".join(ch for ch in node.instance_id if ch.isdigit())[-8:].rjust(8, "0")
    return f"16542{digits}{gpu}"


def _chunks(message: str, width: int = 54) -> list[str]:
    """Split a message into dcgmi's overflow chunks (at spaces, at most ``width``)."""
    chunks: list[str] = []
    line = ""
    for word in message.split():
        if line and len(line) + 1 + len(word) > width:
            chunks.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    if line:
        chunks.append(line)
    return chunks


def health_output(node: NodeState) -> str:
    """``dcgmi health -c -j`` on ``node`` (exit code 0 either way, as dcgmi does)."""
    gpus: dict[str, Any] = {}
    for gpu in range(node.gpus):
        faults = node.hardware_faults_on(gpu)
        if not faults:
            continue
        systems: dict[str, Any] = {}
        for fault in faults:
            info = fault.info
            text = info.health_message.format(gpu=gpu, bus=pci_bus(gpu))
            systems[f"{info.health_system} system"] = {
                "overflow": _chunks(text),
                "value": "Failure",
            }
        gpus[str(gpu)] = {"children": {"Errors": {"children": systems}}, "value": "Failure"}
    body: dict[str, Any] = {"Overall Health": {"value": "Failure" if gpus else "Healthy"}}
    if gpus:
        body["GPU"] = {"children": gpus}
    return _dump({"body": body, "header": ["Health Monitor Report"]})


# nvidia-smi exit codes (gpu-faults.md section 3).
RESET_OK = 0
RESET_NOT_SUPPORTED = 3
RESET_IN_USE = 255
RESET_FALLEN_OFF_BUS = 15


def reset_output(
    node: NodeState, gpus: list[int], *, busy: bool
) -> tuple[int, str, str, list[int]]:
    """``nvidia-smi -r -i N && ...`` on ``node``: (exit code, stdout, stderr, GPUs reset).

    Like the script, it stops at the first GPU that fails. ``busy``: processes
    still hold the GPUs (pods not drained), which nvidia-smi refuses.
    """
    indices = sorted(set(gpus)) if gpus else list(range(node.gpus))
    out: list[str] = []
    done: list[int] = []
    for gpu in indices:
        bus = pci_bus(gpu)
        if any(f.kind is FaultKind.FALLEN_OFF_BUS for f in node.gpu_faults(gpu)):
            err = (
                f"Unable to determine the device handle for GPU{bus}: GPU is lost. "
                "Reboot the system to recover this GPU"
            )
            return RESET_FALLEN_OFF_BUS, "\n".join(out), err, done
        if not node.reset_supported:
            err = f"GPU {bus}: Unknown Error\nUnable to reset this GPU: Not Supported"
            return RESET_NOT_SUPPORTED, "\n".join(out), err, done
        if busy:
            err = (
                f"Unable to reset GPU {bus} because it's being used by some other process "
                "(e.g. CUDA application, graphics application like X server, monitoring "
                "application like other instance of nvidia-smi). Please first kill all "
                "processes using this GPU and all compute applications running in the "
                "system.\nGPU is in use by another client."
            )
            return RESET_IN_USE, "\n".join(out), err, done
        out.append(f"GPU {bus} was successfully reset.")
        done.append(gpu)
    out.append("All done.")
    return RESET_OK, "\n".join(out), "", done
