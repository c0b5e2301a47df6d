"""Guard: every parser of the node agent reads 64 KB of hostile text in bounded time.

Not a benchmark (issue 35): the same bound and hostile inputs as the domain's
guard (tests/gpu_remediation/hostile_inputs.py), here for what the agent reads
inside its cycle, which NPD's timeout bounds:

* the kernel log, as a file, as ``/dev/kmsg`` records and as ``journalctl -k``
  output (Xid, SXid and fallen-off-the-bus lines), and a line's tail;
* the problems of a scan and the condition message written from them
  (``cycle.xid_problems``, ``cycle.sxid_problems``, ``findings.render``);
* ``nvidia-smi -q`` (``checks.nvidia_smi.parse_query`` and ``evaluate``, stdout and stderr);
* the ``gpu-degraded`` check (``checks.gpu_degraded.evaluate``: the same output read
  for PCIe link and clock-event reasons, with a state of streaks to carry);
* ``dcgmi health -c -j`` (``checks.dcgm.healthy_fast`` and ``evaluate``: raw
  output, which includes the "watches not enabled" test, and a health document);
* the EFA check (``checks.efa.check_efa``: sysfs port states and ``fi_info`` output);
* the ``efa-degraded`` check (``checks.efa_degraded.parse_rate`` and ``evaluate``: the
  port's ``rate`` file and its error counters).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent import cycle, kernel_log
from agent.checks import dcgm, efa, efa_degraded, gpu_degraded, nvidia_smi
from agent.config import EFA_DEGRADATION_COUNTERS, AgentConfig
from agent.findings import render
from agent.runner import MAX_PARSED_OUTPUT, ToolResult
from tests.agent.outputs import smi_output
from tests.gpu_remediation.hostile_inputs import (
    KNOWN_SHAPES,
    SIZE,
    health_document_of_systems,
    hostile_texts,
    timed,
)

pytestmark = pytest.mark.linear_guard

_TOOL = "#!/bin/sh\nexec cat '{path}'\n"


class Node:
    """A scratch node: kernel log files, a fake ``journalctl`` and ``fi_info``, an EFA sysfs."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.log = root / "kern.log"
        self.sysfs = root / "sys"
        device = self.sysfs / "bus" / "pci" / "devices" / "0000:10:00.0"
        device.mkdir(parents=True)
        (device / "vendor").write_text(efa.EFA_VENDOR)
        (device / "device").write_text("0xefa1")
        (self.sysfs / "module" / "efa").mkdir(parents=True)
        self.port = self.sysfs / "class" / "infiniband" / "rdmap16s27" / "ports" / "1"
        (self.port / "hw_counters").mkdir(parents=True)
        (self.port.parents[1] / "device").mkdir()
        (self.port.parents[1] / "device" / "vendor").write_text(efa.EFA_VENDOR)
        self.journalctl = self._tool("journalctl")
        self.fi_info = self._tool("fi_info")
        self.config = AgentConfig(
            expected_gpus=8,
            expected_efa=1,
            dcgm_set_watches=False,  # evaluate() must not run dcgmi
            sysfs_root=str(self.sysfs),
            fi_info=str(self.fi_info),
            journalctl=str(self.journalctl),
            efa_degraded_expected_rate_gbps=100,
        )

    def _tool(self, name: str) -> Path:
        tool = self.root / name
        tool.write_text(_TOOL.format(path=self.root / f"{name}.out"))
        tool.chmod(0o755)
        return tool

    def write(self, text: str) -> None:
        """Put ``text`` everywhere the agent reads it from."""
        data = text.encode() + b"\n"
        for path in (self.log, self.root / "journalctl.out", self.root / "fi_info.out"):
            path.write_bytes(data)
        (self.port / "state").write_bytes(data)
        (self.port / "phys_state").write_bytes(data)
        (self.port / "rate").write_bytes(data)
        for counter in EFA_DEGRADATION_COUNTERS:
            (self.port / "hw_counters" / counter).write_bytes(data)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Node:
    return Node(tmp_path_factory.mktemp("hostile-node"))


def _ran(name: str, stdout: str, stderr: str = "") -> ToolResult:
    return ToolResult((name,), "ok", 0, stdout.encode(), stderr.encode(), 0.1, 10.0)


def _scan(node: Node, kind: str) -> kernel_log.ScanOutcome:
    target = "" if kind == "journal" else str(node.log)
    return kernel_log.scan_kernel_log(
        kind,
        target,
        None,
        boot_changed=False,
        deadline=time.monotonic() + 60,
        journalctl=str(node.journalctl),
    )


def _problems_and_message(node: Node) -> None:
    scan = _scan(node, "file")
    now = time.time()
    xids, _, _ = cycle.xid_problems(scan.xids, {}, node.config, now)
    sxids, _ = cycle.sxid_problems(scan.sxids, now)
    render(xids + sxids, [], ok_text="ok", max_bytes=node.config.max_output_length)


def _parsers(node: Node) -> dict[str, Callable[[str], object]]:
    """Each parser, reading ``text`` (already written where it reads from, see Node.write)."""
    config = node.config
    deadline = time.monotonic() + 3600
    return {
        "kernel_log file": lambda _: _scan(node, "file"),
        "kernel_log kmsg": lambda _: _scan(node, "kmsg"),
        "kernel_log journal": lambda _: _scan(node, "journal"),
        "kernel_log line tail": lambda t: kernel_log._tail(t.encode()),
        "cycle problems and findings.render": lambda _: _problems_and_message(node),
        "nvidia_smi.parse_query": nvidia_smi.parse_query,
        "nvidia_smi.evaluate": lambda t: nvidia_smi.evaluate(_ran("nvidia-smi", t, t), config, {}),
        "gpu_degraded.evaluate": lambda t: gpu_degraded.evaluate(
            _ran("nvidia-smi", t, t), config, {}, time.time()
        ),
        "dcgm.healthy_fast": lambda t: dcgm.healthy_fast(t.encode()),
        "dcgm.evaluate (raw output)": lambda t: dcgm.evaluate(
            _ran("dcgmi", t, t), config, deadline
        ),
        "dcgm.evaluate (a system a line)": lambda t: dcgm.evaluate(
            _ran("dcgmi", health_document_of_systems(t)), config, deadline
        ),
        "efa.check_efa": lambda _: efa.check_efa(config, deadline),
        "efa_degraded.parse_rate": efa_degraded.parse_rate,
        "efa_degraded.evaluate": lambda _: efa_degraded.evaluate(config, {}, time.time()),
    }


def _run_all(node: Node, text: str, label: str) -> None:
    node.write(text)
    for name, parse in _parsers(node).items():
        timed(f"{name} on {label}", parse, text)


def test_every_agent_parser_reads_every_known_hostile_shape_within_the_bound(node: Node) -> None:
    for shape, text in KNOWN_SHAPES.items():
        _run_all(node, text, shape)


@settings(max_examples=10, deadline=None, database=None, derandomize=True)
@given(text=hostile_texts())
def test_every_agent_parser_reads_hypothesis_hostile_inputs_within_the_bound(
    node: Node, text: str
) -> None:
    assert len(text) == SIZE
    _run_all(node, text, "hypothesis' input")


def test_a_scan_full_of_distinct_xids_is_reported_in_bounded_time(node: Node) -> None:
    # Every line a different (Xid, bus): one problem each, all ranked for the message.
    lines = (
        f"NVRM: Xid (PCI:0000:{i % 256:02x}:{i // 256 % 256:02x}): {i % 99_999}, pid=1\n"
        for i in range(SIZE // 40)
    )
    node.write("".join(lines))
    timed("problems and message of 1,600 distinct Xids", _problems_and_message, node)


# ----------------------------------------------- results the rewrites must keep

_OLD_WATCHES_OFF = re.compile(r"watch\w*\s+(?:are\s+|is\s+)?not\s+(?:enabled|set)", re.I)
_WATCH_WORDS = ["watch", "Watches", "es", "x", "are", "is", "not", "enabled", "set", "WATCH"]


@settings(max_examples=500, deadline=None, database=None, derandomize=True)
@given(
    st.lists(
        st.tuples(st.sampled_from(_WATCH_WORDS), st.sampled_from(["", " ", "  ", "\n", "_"])),
        max_size=9,
    ).map(lambda parts: "".join(word + gap for word, gap in parts))
)
def test_watches_off_is_recognised_as_the_old_regex_did(text: str) -> None:
    assert dcgm._watches_off(text) == bool(_OLD_WATCHES_OFF.search(text))


def test_watches_off_after_a_phrase_running_into_the_next_word() -> None:
    assert dcgm._watches_off("x not enabledwatch not set")
    assert dcgm._watches_off("Error: Health watches are not enabled")
    assert not dcgm._watches_off("watches were enabled")


@pytest.mark.parametrize(
    ("word", "action"),
    [
        ("0x2", 2),
        ("2", 2),
        ("0002", 2),
        ("0x0f", 15),
        ("16", None),
        ("12ab", None),
        ("9" * 5000, None),
    ],
)
def test_a_recovery_action_number_is_read_without_converting_long_or_bad_digits(
    word: str, action: int | None
) -> None:
    assert nvidia_smi._recovery_number(word) == action


def test_a_kmsg_record_with_an_impossible_sequence_number_is_skipped_not_fatal(
    tmp_path: Path,
) -> None:
    log = tmp_path / "kmsg"
    log.write_text(
        f"6,{'9' * 5000},1,-;NVRM: Xid (PCI:0000:53:00): 79, pid=1\n"
        "6,12,2,-;NVRM: Xid (PCI:0000:54:00): 48, pid=2\n"
    )
    scan = kernel_log.scan_kernel_log(
        "kmsg", str(log), None, boot_changed=False, deadline=time.monotonic() + 60
    )
    assert [(hit.xid, hit.bus) for hit in scan.xids] == [(48, "0000:54:00")]
    assert scan.position["seq"] == 12


def test_a_kernel_line_of_a_mebibyte_is_read_within_the_bound() -> None:
    # The agent reads lines of up to 1 MiB (kernel_log.CHUNK); what it does per
    # line must be linear in the line too: its tail's noise words, Xid 154's action.
    noise = b", " + b"pid=2, " * (kernel_log.CHUNK // 7)
    timed("tail of a 1 MiB line of noise words", kernel_log._tail, noise)
    heads = "recovery action changed from 0x0 " * (kernel_log.CHUNK // 33)
    hit = kernel_log.XidHit(xid=154, bus="0000:53:00", tail=heads)
    timed("Xid 154 action of a 1 MiB line", cycle._recovery_action, hit)


def test_a_line_tail_of_many_noise_words_keeps_what_follows_them() -> None:
    assert kernel_log._tail(
        b", pid=1, name=x, " + b"pid=2, " * 100_000 + b"Ch 0000001a, RST: Yes"
    ) == ("RST: Yes")


def test_deeply_nested_dcgm_output_is_not_healthy_and_not_an_error() -> None:
    nested = '{"body": {"Overall Health": ' + "[" * 5000 + "]" * 5000 + "}}"
    assert not dcgm.healthy_fast(nested.encode())
    config = AgentConfig(dcgm_set_watches=False)
    outcome = dcgm.evaluate(_ran("dcgmi", nested), config, time.monotonic() + 60)
    assert outcome.unknown is not None
    assert "DCGM health unknown" in outcome.unknown


# ------------------------------------------------------------ the output cap


def test_dcgmi_output_beyond_the_cap_is_unknown_without_being_read() -> None:
    pad = "x" * MAX_PARSED_OUTPUT
    huge = '{"body": {"Overall Health": {"value": "Healthy"}}, "pad": "' + pad + '"}'
    config = AgentConfig(dcgm_set_watches=False)
    outcome = dcgm.evaluate(_ran("dcgmi", huge), config, time.monotonic() + 60)
    assert outcome.unknown == (
        f"DCGM health unknown: dcgmi health printed {len(huge)} bytes,"
        f" more than the {MAX_PARSED_OUTPUT} read"
    )


def test_nvidia_smi_output_beyond_the_cap_is_read_up_to_it() -> None:
    config = AgentConfig(expected_gpus=8)
    junk = "x\n" * MAX_PARSED_OUTPUT
    outcome = nvidia_smi.evaluate(_ran("nvidia-smi", smi_output() + junk), config, {})
    assert (outcome.problems, outcome.unknown, outcome.detail) == (
        [],
        None,
        "8 GPU(s) answer nvidia-smi",
    )
    # A GPU lost only past the cap is not seen: those lines are not read.
    lost = "Unable to determine the device handle for GPU 0000:9a:00.0: Unknown Error\n"
    far = nvidia_smi.evaluate(_ran("nvidia-smi", smi_output() + junk + lost), config, {})
    near = nvidia_smi.evaluate(_ran("nvidia-smi", smi_output() + lost + junk), config, {})
    assert (len(far.problems), len(near.problems)) == (0, 1)
