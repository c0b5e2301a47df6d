"""``nvidia-smi -r [-i N]`` (run by the host reset script) -> a typed reset result."""

from __future__ import annotations

import re

from gpu_remediation.contracts import ResetGpusResult, ResetStatus
from gpu_remediation.tool_outputs.common import MAX_DETAIL, truncate

__all__ = ["parse_gpu_reset"]

# nvidia-smi exit codes (reference section 3).
_RESET_EXIT_MEANINGS: dict[int, str] = {
    2: "invalid argument",
    3: "not supported",
    4: "no permission (needs root)",
    6: "GPU not found",
    9: "NVIDIA driver not loaded",
    15: "GPU has fallen off the bus",
    255: "other error",
}
_NOT_SUPPORTED_TEXT = re.compile(r"unknown error|not supported", re.IGNORECASE)
# Newer drivers: "In use by another client"; older ones: "is currently in use by
# another process" (NVIDIA/gpu-operator#118). Both mean something holds the GPU.
_IN_USE_TEXT = re.compile(
    r"in use by another client|currently in use by another process|"
    r"currently being used by one or more other processes",
    re.IGNORECASE,
)
_FALLEN_OFF_TEXT = re.compile(r"fallen off the bus", re.IGNORECASE)


def _relevant_line(text: str, pattern: re.Pattern[str] | None = None) -> str:
    """The line matching ``pattern`` (else the first non-empty line), shortened."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if pattern is not None:
        for line in lines:
            if pattern.search(line):
                return truncate(line, 300)
    return truncate(lines[0], 300) if lines else ""


def parse_gpu_reset(
    exit_code: int, stdout: str, stderr: str, *, command_id: str = ""
) -> ResetGpusResult:
    """Map the outcome of ``nvidia-smi -r [-i N]`` to a typed reset result.

    Precedence, most specific first: exit 0 is ``ok``; exit 15 or "fallen off
    the bus" is ``fallen_off_bus`` (only a reboot helps); "In use by another
    client" is ``failed`` (work is still on the GPU); exit 3, "not supported" or
    "Unknown Error" is ``not_supported`` (on EC2 the hypervisor blocks the
    function-level reset, and retrying will not help); anything else is
    ``failed`` with the exit code's meaning.

    Args:
        exit_code: The process exit code.
        stdout: Standard output of the command.
        stderr: Standard error of the command.
        command_id: The host-command id (SSM command id or Job name), echoed back.

    Returns:
        The result; anything but ``ok`` makes the ladder climb.
    """
    text = f"{stdout}\n{stderr}"
    status: ResetStatus
    if exit_code == 0:
        status, detail = "ok", _relevant_line(stdout) or "reset succeeded"
    elif exit_code == 15 or _FALLEN_OFF_TEXT.search(text):
        status = "fallen_off_bus"
        detail = f"GPU has fallen off the bus: {_relevant_line(text, _FALLEN_OFF_TEXT)}"
    elif _IN_USE_TEXT.search(text):
        status = "failed"
        detail = (
            "GPU in use by another client (processes, nvidia-persistenced or the DCGM "
            "host engine still hold it): "
            f"{_relevant_line(text, _IN_USE_TEXT)}"
        )
    elif exit_code == 3 or _NOT_SUPPORTED_TEXT.search(text):
        status = "not_supported"
        detail = (
            "GPU reset not supported on this platform (on EC2 the hypervisor blocks "
            f"the function-level reset): {_relevant_line(text, _NOT_SUPPORTED_TEXT)}"
        )
    else:
        status = "failed"
        meaning = _RESET_EXIT_MEANINGS.get(exit_code, "unexpected exit code")
        detail = f"{meaning}: {_relevant_line(stderr) or _relevant_line(stdout)}"
    prefix = f"nvidia-smi -r exited {exit_code}"
    return ResetGpusResult(
        status=status,
        detail=truncate(f"{prefix}: {detail}".rstrip(": "), MAX_DETAIL),
        command_id=command_id,
    )
