"""``nvidia-smi nvlink -s`` and ``nvidia-smi nvlink -e``: NVLink links and their error counters.

``nvidia-smi -q`` prints no NVLink link or counter (only a ``Fabric`` block on
NVSwitch systems), so the ``gpu-degraded`` check runs these two as well
(agent/checks/gpu_degraded.py judges them). Both print a ``GPU <index>: <name>
(UUID: ...)`` line per GPU (the NVML index, as ``-q``'s bus order), then a line
per link, indented by a TAB and a space (shown as spaces where a capture was
copied):

* ``-s``: ``Link 0: 25 GB/s`` for an active link, ``Link 3: <inactive>`` for one
  that is down; ``NVML: Unable to retrieve NVLink information as all links are
  inActive`` when all are (the casing varies: read case-blind); nothing at all on
  a GPU without NVLink (an A10).
* ``-e``: ``Link 0: Replay Errors: 0``, ``Recovery Errors``, ``CRC Errors`` per
  link, a blank line between links. The display stops at 65535 (a real V100 capture
  reads ``CRC Errors: 65535``, the "maximum displayed" count in its author's words):
  a counter stuck there no longer rises. NVLink5 GPUs print more counters (BER,
  FEC): not read.

Real captures in tests/agent/fixtures/real/nvsmi_nvlink_*. Unknown lines are
skipped; the parsers read each line once (linear in the output).
"""

from __future__ import annotations

import re
from typing import NamedTuple

_GPU = re.compile(r"GPU (\d{1,3}): ")
_LINK = re.compile(r"\s*Link (\d{1,3}): (.{0,64})$")
_ERROR = re.compile(r"(Replay|Recovery|CRC) Errors: (\d{1,20})$")
ERROR_KINDS: dict[str, str] = {"Replay": "replay", "Recovery": "recovery", "CRC": "crc"}
MAX_GPUS = 64
MAX_LINKS = 64


class LinkStatus(NamedTuple):
    """What ``nvlink -s`` printed of one GPU's links."""

    up: frozenset[int]
    down: frozenset[int]
    all_down: bool  # "all links are inActive"


def parse_status(text: str) -> dict[int, LinkStatus]:
    """GPU index -> its links as ``nvidia-smi nvlink -s`` printed them."""
    up: dict[int, set[int]] = {}
    down: dict[int, set[int]] = {}
    all_down: set[int] = set()
    gpu: int | None = None
    for line in text.splitlines():
        if line.startswith("GPU ") and (header := _GPU.match(line)):
            gpu = int(header.group(1))
            if len(up) < MAX_GPUS:
                up.setdefault(gpu, set())
                down.setdefault(gpu, set())
            continue
        if gpu is None or gpu not in up:
            continue
        if "all links are inactive" in line.lower():
            all_down.add(gpu)
            continue
        link = _LINK.match(line)
        if link is None or int(link.group(1)) >= MAX_LINKS:
            continue
        number, value = int(link.group(1)), link.group(2).strip()
        if value.lower() == "<inactive>":
            down[gpu].add(number)
        elif value.endswith("GB/s"):
            up[gpu].add(number)
    return {
        index: LinkStatus(frozenset(up[index]), frozenset(down[index]), index in all_down)
        for index in up
    }


def parse_errors(text: str) -> dict[int, dict[str, int]]:
    """GPU index -> error kind (``replay``, ``recovery``, ``crc``) -> sum over its links."""
    totals: dict[int, dict[str, int]] = {}
    gpu: int | None = None
    for line in text.splitlines():
        if line.startswith("GPU ") and (header := _GPU.match(line)):
            gpu = int(header.group(1))
            if len(totals) < MAX_GPUS:
                totals.setdefault(gpu, {})
            continue
        if gpu is None or gpu not in totals or "Errors: " not in line:
            continue
        link = _LINK.match(line)
        if link is None:
            continue
        error = _ERROR.match(link.group(2).strip())
        if error is not None:
            kind = ERROR_KINDS[error.group(1)]
            totals[gpu][kind] = totals[gpu].get(kind, 0) + int(error.group(2))
    return totals
