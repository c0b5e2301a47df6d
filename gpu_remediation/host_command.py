"""The fixed host commands: what runs on a GPU node, its script, its tag and its output.

Only three commands exist: reset named GPUs, run the DCGM diagnostic at a
level, and read DCGM health. Each is rendered from validated integers into a
fixed shell script; nothing from evidence, alerts or operators is ever
interpolated as text. The script's first line tags it with the command, so
the fleet simulator knows what to simulate without guessing.

JSON results are gzip-compressed and base64-encoded on the host because SSM
truncates standard output at 24,000 characters, which a level-3 diagnostic
of eight GPUs exceeds.

Shared by the executors (``activities.host_commands``, ``activities.aws``,
``activities.kube_jobs``) and the simulated hosts (``simulator``), which is
why it lives in the domain package and imports neither.
"""

from __future__ import annotations

import base64
import gzip
import json
import shlex
from typing import Literal

from pydantic import Field, model_validator

from gpu_remediation.models import GpuIndex, Model

# The first line of every script names the command as JSON; hosts ignore the
# comment, the fleet simulator reads it to know what to simulate.
TAG = "# gpu-remediation host-command: "
ENCODED_MARKER = "gpu-remediation-b64gz:"


class HostCommand(Model):
    """One of the fixed commands, with its validated arguments."""

    kind: Literal["gpu_reset", "dcgm_diag", "dcgm_health"]
    gpu_indices: list[GpuIndex] = Field(default_factory=list, max_length=64)
    level: int | None = Field(default=None, ge=1, le=4)

    @model_validator(mode="after")
    def _arguments_fit_the_kind(self) -> HostCommand:
        if self.kind == "dcgm_diag" and self.level is None:
            raise ValueError("dcgm_diag needs a level")
        if self.kind != "dcgm_diag" and self.level is not None:
            raise ValueError(f"{self.kind} takes no level")
        if self.kind == "dcgm_health" and self.gpu_indices:
            raise ValueError("dcgm_health checks every GPU")
        return self

    def argv(self) -> list[list[str]]:
        """The programs to run, as argument lists (one per GPU for a reset)."""
        if self.kind == "gpu_reset":
            if not self.gpu_indices:
                return [["nvidia-smi", "-r"]]
            return [["nvidia-smi", "-r", "-i", str(i)] for i in sorted(set(self.gpu_indices))]
        if self.kind == "dcgm_diag":
            argv = ["dcgmi", "diag", "-r", str(self.level), "-j"]
            if self.gpu_indices:
                argv += ["-i", ",".join(str(i) for i in sorted(set(self.gpu_indices)))]
            return [argv]
        return [["dcgmi", "health", "-c", "-j"]]

    @property
    def encodes_output(self) -> bool:
        """Whether stdout is JSON sent compressed (the DCGM commands)."""
        return self.kind != "gpu_reset"

    def script(self) -> list[str]:
        """The shell lines for ``AWS-RunShellScript`` or a Job's ``sh -c``."""
        tag = TAG + self.model_dump_json()
        commands = [shlex.join(argv) for argv in self.argv()]
        if not self.encodes_output:
            return [tag, *_RESET_RELEASE, f"{' && '.join(commands)}; rc=$?", *_RESET_RESTORE]
        return [
            tag,
            'out="$(mktemp)"',
            f'{commands[0]} > "$out"; rc=$?',
            f'printf %s {ENCODED_MARKER}; gzip -c "$out" | base64 -w0; rm -f "$out"',
            'exit "$rc"',
        ]


# nvidia-smi -r refuses a GPU anything holds open ("In use by another client"):
# nvidia-persistenced and the DCGM host engine do so on every GPU node. Before
# the reset they are stopped, and after it started again, whatever the reset's
# outcome. What was stopped is written to a state file first, so a retried
# command (the first attempt lost mid-way) still restarts it, and a unit that
# was not running is never started. Fixed text: nothing is interpolated.
RESET_STATE_FILE = "/run/gpu-remediation-reset.held"
_HOLDERS = ("nvidia-persistenced", "nvidia-dcgm", "dcgm")
_RESET_RELEASE = [
    f'held="{RESET_STATE_FILE}"; touch "$held"',
    f"for unit in {' '.join(_HOLDERS)}; do",
    '  if systemctl is-active --quiet "$unit" 2>/dev/null; then',
    '    grep -qx "$unit" "$held" || echo "$unit" >> "$held"',
    '    systemctl stop "$unit"',
    "  fi",
    "done",
]
# Exits with the reset's code, so the parser reads the reset, not the restart.
_RESET_RESTORE = [
    'while read -r unit; do systemctl start "$unit" || rc_start=$?; done < "$held"',
    'rm -f "$held"',
    '[ -n "${rc_start:-}" ] && echo "gpu-remediation: restarting a held unit failed" >&2',
    'exit "$rc"',
]


def parse_tag(script: list[str]) -> HostCommand | None:
    """Recover the command from a script's tag line (used by the simulator)."""
    if not script or not script[0].startswith(TAG):
        return None
    return HostCommand.model_validate(json.loads(script[0][len(TAG) :]))


def encode_output(raw: str) -> str:
    """What the script prints for a raw JSON result (the simulator's host side)."""
    return ENCODED_MARKER + base64.b64encode(gzip.compress(raw.encode())).decode()


def decode_output(stdout: str) -> str:
    """Undo the host-side encoding; raises ValueError if it is not intact.

    Raises:
        ValueError: The output is not marked, or the base64/gzip is truncated.
    """
    text = stdout.strip()
    if not text.startswith(ENCODED_MARKER):
        raise ValueError(f"host output is not in the expected encoding: {text[:120]!r}")
    try:
        return gzip.decompress(base64.b64decode(text[len(ENCODED_MARKER) :])).decode()
    except (ValueError, OSError, EOFError) as err:
        raise ValueError(f"host output is truncated or corrupt: {err}") from err
