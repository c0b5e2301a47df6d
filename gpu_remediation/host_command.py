"""The fixed host commands: what runs on a GPU node, its script, its tag and its output.

Only four commands exist: reset named GPUs, run the DCGM diagnostic at a
level, read DCGM health, and load each EFA device with libfabric's
``fi_pingpong`` in loopback (``efa_loopback``, reading its error counters
before and after). Through SSM they run as the project's own Command
document (``deploy/aws/gpu-remediation-host-command.json``, named by the
``ssm_document`` setting): a fixed script whose only inputs are typed
parameters (an action from a fixed list, a GPU index list and a diag level
that SSM checks against the document's patterns before anything runs). A Job
runs the equivalent fixed script rendered here from validated integers
(``HostCommand.script``; tests/activities/test_host_document_script.py runs
both and compares what they do). Nothing from evidence, alerts or operators is
ever interpolated as text. A Job script's first line tags it with the command,
so the fleet simulator knows what to simulate without guessing; through SSM
the typed parameters say it.

JSON results (and the loopback's report) are gzip-compressed and
base64-encoded on the host because SSM truncates standard output at 24,000
characters, which a level-3 diagnostic of eight GPUs exceeds. Decoding them
is bounded (``MAX_ENCODED_OUTPUT``, ``MAX_DECODED_OUTPUT``): what a host
prints is untrusted (issue 35), and a few kilobytes of gzip can expand to
gigabytes.

Shared by the executors (``activities.host_commands``, ``activities.host_ssm``,
``activities.kube_jobs``) and the simulated hosts (``simulator``), which is
why it lives in the domain package and imports neither.
"""

from __future__ import annotations

import base64
import gzip
import json
import shlex
import zlib
from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import Field, model_validator

from gpu_remediation.models import GpuIndex, Model

HOST_COMMAND_DOCUMENT = "GpuRemediation-HostCommand"
"""Default name of the SSM Command document the SSM executor runs (the ``ssm_document``
setting): ``deploy/aws/gpu-remediation-host-command.json``, created under this name."""
DOCUMENT_ACTION = "action"
DOCUMENT_GPUS = "gpuIndices"
DOCUMENT_LEVEL = "diagLevel"
DOCUMENT_TIMEOUT = "executionTimeout"

# The first line of every script names the command as JSON; hosts ignore the
# comment, the fleet simulator reads it to know what to simulate.
TAG = "# gpu-remediation host-command: "
ENCODED_MARKER = "gpu-remediation-b64gz:"

MAX_DECODED_OUTPUT = 16 * 1024 * 1024
"""Most bytes an encoded output may decompress to (16 MiB); more is refused.

The DCGM results recorded in the tests are under 10 KB, and through SSM the
encoded text cannot pass 24,000 characters; 16 MiB is over a thousand times
a real result, so it refuses none, while a gzip bomb from a compromised host
(64 MiB of zeros compresses to about 64 KiB) costs at most 16 MiB of memory
and a few milliseconds instead of whatever the host chose.
"""
MAX_ENCODED_OUTPUT = 24 * 1024 * 1024
"""Most characters of base64 text (after the marker) decoded at all (24 MiB).

Above what any output within ``MAX_DECODED_OUTPUT`` encodes to, even
incompressible (gzip adds a few bytes per 64 KiB block, base64 a third), so
this only refuses what the decompression limit would refuse anyway, before
the base64 decoding copies it.
"""


class HostCommand(Model):
    """One of the fixed commands, with its validated arguments."""

    kind: Literal["gpu_reset", "dcgm_diag", "dcgm_health", "efa_loopback"]
    gpu_indices: list[GpuIndex] = Field(default_factory=list, max_length=64)
    level: int | None = Field(default=None, ge=1, le=4)

    @model_validator(mode="after")
    def _arguments_fit_the_kind(self) -> HostCommand:
        if self.kind == "dcgm_diag" and self.level is None:
            raise ValueError("dcgm_diag needs a level")
        if self.kind != "dcgm_diag" and self.level is not None:
            raise ValueError(f"{self.kind} takes no level")
        if self.kind in ("dcgm_health", "efa_loopback") and self.gpu_indices:
            raise ValueError(f"{self.kind} takes no GPU indices")
        return self

    def argv(self) -> list[list[str]]:
        """The programs to run, as argument lists (one per GPU for a reset).

        Raises:
            ValueError: The command is the EFA loopback, whose programs depend
                on the EFA devices the host has: its script runs the server
                (``EFA_LOOPBACK_SERVER``) and the client (``EFA_LOOPBACK_CLIENT``)
                once per device, ``<device>`` replaced by each device's name.
        """
        if self.kind == "efa_loopback":
            raise ValueError(
                "efa_loopback runs EFA_LOOPBACK_SERVER and EFA_LOOPBACK_CLIENT per EFA device"
            )
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

    def ssm_parameters(self) -> dict[str, list[str]]:
        """The typed parameters of the SSM document that runs this command.

        The GPU list is sorted and without repeats (as ``argv`` runs it); the
        diag level is sent only for the diagnostic.
        """
        parameters: dict[str, list[str]] = {
            DOCUMENT_ACTION: [self.kind],
            DOCUMENT_GPUS: [",".join(str(i) for i in sorted(set(self.gpu_indices)))],
        }
        if self.level is not None:
            parameters[DOCUMENT_LEVEL] = [str(self.level)]
        return parameters

    @classmethod
    def from_ssm_parameters(cls, parameters: Mapping[str, Sequence[str]]) -> HostCommand:
        """The command an invocation of the SSM document with ``parameters`` runs.

        The simulated host's side of ``ssm_parameters``: the parameters have
        passed the document's own checks (defaults filled in).

        Raises:
            ValueError: A parameter is missing or does not make a valid command.
        """

        def one(name: str) -> str:
            values = list(parameters.get(name) or [])
            if len(values) != 1:
                raise ValueError(f"SSM parameter {name}: expected one value, got {values!r}")
            return str(values[0])

        kind = one(DOCUMENT_ACTION)
        gpus = one(DOCUMENT_GPUS)
        return cls.model_validate(
            {
                "kind": kind,
                "gpu_indices": [int(i) for i in gpus.split(",")] if gpus else [],
                "level": int(one(DOCUMENT_LEVEL)) if kind == "dcgm_diag" else None,
            }
        )

    @property
    def encodes_output(self) -> bool:
        """Whether stdout is sent compressed (the DCGM commands' JSON, the loopback's report)."""
        return self.kind != "gpu_reset"

    def script(self) -> list[str]:
        """The shell lines of a Job's ``sh -c`` (SSM runs the document instead)."""
        tag = TAG + self.model_dump_json()
        if self.kind == "efa_loopback":
            return [tag, *EFA_LOOPBACK_SCRIPT]
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


# The EFA loopback (issue 37): what AWS's own single-host check does (efa_test.sh
# in the EFA installer: an fi_pingpong server and a client to localhost with
# FI_EFA_ENABLE_SHM_TRANSFER=0, so the traffic goes through the device, not
# shared memory), once per EFA device (-d <device>-rdm, as awslabs'
# awsome-distributed-ai checks each device), with 1 MiB messages 10,000 times
# each way (about 20 GiB) instead of its 10 small ones, so the port carries load.
# Around each run the script records the device's retransmit-timeout and drop
# counters, which the agent's efa-degraded check watches: an idle, quarantined
# port raises neither, a bad one under load does. Devices are EFA's by their
# PCI vendor (as the agent's EFA check picks them). Fixed text: the device
# names come from the host's sysfs and are only ever quoted; nothing from the
# worker is interpolated. Its lines begin with EFA_REPORT, which the parser
# (tool_outputs.efa_loopback) reads; the tool's own output is kept as printed.
EFA_SYSFS = "/sys/class/infiniband"
EFA_VENDOR = "0x1d0f"
EFA_REPORT = "gpu-remediation-efa:"
EFA_COUNTERS = ("retrans_timeout_events", "rx_drops")
EFA_LOOPBACK_SIZE = 1_048_576
EFA_LOOPBACK_ITERATIONS = 10_000
EFA_LOOPBACK_TIMEOUT_S = 30
"""Most seconds one device's client may run (``timeout``). Its 20 GiB take 1.75 s at an
assumed 12,000 MB/s (just under a 100 Gb/s port), 9 s at the 2,359 MB/s of the 10-message
sample in aws/aws-cdi-sdk's install guide (no loopback figure at this load is published);
a device too slow for 30 s is cut short and reported as timed out. 32 devices then take
1.5 to 5.5 minutes, at most 32 x 31 s (16.5 minutes), inside ``verification.timeout``."""
_PINGPONG = [
    "fi_pingpong",
    *("-p", "efa", "-e", "rdm", "-d", "<device>-rdm"),
    *("-S", str(EFA_LOOPBACK_SIZE), "-I", str(EFA_LOOPBACK_ITERATIONS)),
]
EFA_LOOPBACK_SERVER = tuple(_PINGPONG)
EFA_LOOPBACK_CLIENT = (*_PINGPONG, "localhost")


def _pingpong(argv: Sequence[str]) -> str:
    # shlex quotes the placeholder ('<device>-rdm'); it becomes the device's quoted name.
    return shlex.join(argv).replace("'<device>-rdm'", '"$name-rdm"')


_COUNTER_VALUE = '$(cat "$dev/ports/1/hw_counters/$counter" 2>/dev/null)'
EFA_LOOPBACK_SCRIPT = [
    # Where the EFA installer puts libfabric's tools; SSM's shell has no login PATH.
    'PATH="$PATH:/opt/amazon/efa/bin"',
    'out="$(mktemp)"',
    f"for dev in {EFA_SYSFS}/*; do",
    f'  [ "$(cat "$dev/device/vendor" 2>/dev/null)" = {EFA_VENDOR} ] || continue',
    '  name="${dev##*/}"',
    f'  echo "{EFA_REPORT} device $name"',
    f"  for counter in {' '.join(EFA_COUNTERS)}; do",
    f'    echo "{EFA_REPORT} before $counter {_COUNTER_VALUE}"',
    "  done",
    f"  FI_EFA_ENABLE_SHM_TRANSFER=0 timeout {EFA_LOOPBACK_TIMEOUT_S + 5} "
    f"{_pingpong(EFA_LOOPBACK_SERVER)} >/dev/null 2>&1 &",
    "  server=$!",
    "  sleep 1",
    f"  FI_EFA_ENABLE_SHM_TRANSFER=0 timeout {EFA_LOOPBACK_TIMEOUT_S} "
    f"{_pingpong(EFA_LOOPBACK_CLIENT)} 2>&1",
    f'  echo "{EFA_REPORT} exit $?"',
    '  kill "$server" 2>/dev/null; wait "$server" 2>/dev/null',
    f"  for counter in {' '.join(EFA_COUNTERS)}; do",
    f'    echo "{EFA_REPORT} after $counter {_COUNTER_VALUE}"',
    "  done",
    'done > "$out"',
    f'printf %s {ENCODED_MARKER}; gzip -c "$out" | base64 -w0; rm -f "$out"',
    "exit 0",
]


def parse_tag(script: list[str]) -> HostCommand | None:
    """Recover the command from a script's tag line (used by the simulator)."""
    if not script or not script[0].startswith(TAG):
        return None
    return HostCommand.model_validate(json.loads(script[0][len(TAG) :]))


def encode_output(raw: str) -> str:
    """What the script prints for a raw JSON result (the simulator's host side)."""
    return ENCODED_MARKER + base64.b64encode(gzip.compress(raw.encode())).decode()


class OutputTooLarge(ValueError):
    """A host's output is over ``MAX_ENCODED_OUTPUT`` or ``MAX_DECODED_OUTPUT``: refused unread."""


def decode_output(stdout: str) -> str:
    """Undo the host-side encoding; raises ValueError if it is not intact or too large.

    Exactly one gzip member is read (what ``gzip -c`` writes); anything after it
    is refused. An empty payload decodes to an empty string.

    Raises:
        OutputTooLarge: The encoded text is over ``MAX_ENCODED_OUTPUT`` characters,
            or it decompresses to over ``MAX_DECODED_OUTPUT`` bytes (a ValueError).
        ValueError: The output is not marked, or the base64/gzip is truncated or
            corrupt.
    """
    text = stdout.strip()
    if not text.startswith(ENCODED_MARKER):
        raise ValueError(f"host output is not in the expected encoding: {text[:120]!r}")
    encoded = len(text) - len(ENCODED_MARKER)
    if encoded > MAX_ENCODED_OUTPUT:
        raise OutputTooLarge(
            f"host output is too large: {encoded} encoded characters, over the limit "
            f"of {MAX_ENCODED_OUTPUT} (MAX_ENCODED_OUTPUT)"
        )
    try:
        return _gunzip(base64.b64decode(text[len(ENCODED_MARKER) :])).decode()
    except OutputTooLarge:
        raise
    except (ValueError, OSError, EOFError, zlib.error) as err:
        raise ValueError(f"host output is truncated or corrupt: {err}") from err


def _gunzip(data: bytes) -> bytes:
    """One gzip member, decompressed to at most ``MAX_DECODED_OUTPUT`` bytes.

    ``gzip.decompress`` has no bound. The decompressor is asked for one byte
    more than the limit: getting it means the output is over the limit (asking
    for exactly the limit could stop before the end-of-stream marker of an
    output of exactly that size). Getting less means the input ran out first,
    so a stream that has not reached its end is truncated. zlib checks the
    member's CRC and length (``zlib.error`` on a mismatch).

    Raises:
        OutputTooLarge: More than ``MAX_DECODED_OUTPUT`` bytes.
        EOFError: The stream ends before its end-of-stream marker.
        ValueError: Data follows the gzip member.
        zlib.error: Not gzip, or corrupt.
    """
    if not data:
        return b""  # as gzip.decompress: nothing in, nothing out
    decompressor = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # 16+: gzip framing
    output = decompressor.decompress(data, MAX_DECODED_OUTPUT + 1)
    if len(output) > MAX_DECODED_OUTPUT:
        raise OutputTooLarge(
            f"host output decompresses to over {MAX_DECODED_OUTPUT} bytes "
            f"(MAX_DECODED_OUTPUT), refused as a possible gzip bomb"
        )
    if not decompressor.eof:
        raise EOFError("compressed output ended before the end-of-stream marker was reached")
    if decompressor.unused_data:
        # gzip.decompress would read further members; the host writes one, and
        # reading each of thousands of tiny members copies the rest of the input.
        raise ValueError(f"{len(decompressor.unused_data)} bytes after the gzip stream")
    return output
