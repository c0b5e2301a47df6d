"""``efa-degraded``: EFA ports that work, slowly (a port rate below expectation, errors rising).

The rate files are the kernel's format as the EFA driver fills it, built from
the driver and kernel source (fixtures/real/efa_rate_src_*, source on the
first line: no public capture of an EFA ``rate`` file was found); the counter
names are the driver's (fixtures/real/efa_hw_counters_names_linux_amzn.txt).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.checks import efa_degraded
from agent.checks.efa_degraded import EfaDegradedOutcome, evaluate, parse_rate
from agent.config import (
    DEFAULT_EFA_DEGRADED_COUNTER_THRESHOLDS,
    EFA_DEGRADATION_COUNTERS,
    AgentConfig,
    ConfigError,
    efa_driver_version,
    load_config,
)
from agent.findings import EXIT_OK, EXIT_PROBLEM, degraded_text, render
from tests.agent.conftest import Node
from tests.gpu_remediation.hostile_inputs import SIZE, fill, timed

REAL = Path(__file__).parent / "fixtures" / "real"
START = 1_800_000_000.0
NPD_INTERVAL = 30.0


def real(name: str) -> str:
    first, _, rest = (REAL / name).read_text().partition("\n")
    assert first.startswith("# source: ")
    return rest


RATE_100 = real("efa_rate_src_100g_4x_edr.txt")
RATE_200 = real("efa_rate_src_200g_4x_hdr.txt")
RATE_50 = real("efa_rate_src_50g_1x_hdr.txt")
RATE_2_5 = real("efa_rate_src_2_5g_1x_sdr.txt")
PORT_COUNTERS = real("efa_hw_counters_names_linux_amzn.txt").splitlines()[0].split()[1:]


class Sysfs:
    """EFA devices as sysfs shows them: one port each, its rate and every port counter."""

    def __init__(self, root: Path, devices: int = 2, rate: str = RATE_200) -> None:
        self.root = root
        for i in range(devices):
            device = root / "class" / "infiniband" / self.name(i)
            (device / "device").mkdir(parents=True)
            (device / "device" / "vendor").write_text("0x1d0f\n")
            port = device / "ports" / "1"
            (port / "hw_counters").mkdir(parents=True)
            (port / "state").write_text("4: ACTIVE\n")
            (port / "phys_state").write_text("5: LinkUp\n")
            (port / "rate").write_text(rate)
            for counter in PORT_COUNTERS:
                (port / "hw_counters" / counter).write_text("0\n")
            (port / "hw_counters" / "lifespan").write_text("10\n")

    @staticmethod
    def name(i: int) -> str:
        return f"rdmap{0x80 + i}s0"

    def port(self, i: int) -> Path:
        return self.root / "class" / "infiniband" / self.name(i) / "ports" / "1"

    def driver(self, version: str) -> None:
        """The EFA module's version as MODULE_VERSION shows it (amzn-drivers efa_main.c)."""
        path = self.root / "module" / "efa"
        path.mkdir(parents=True, exist_ok=True)
        (path / "version").write_text(f"{version}\n")

    def rate(self, i: int, text: str) -> None:
        (self.port(i) / "rate").write_text(text)

    def counter(self, i: int, name: str, value: int) -> None:
        (self.port(i) / "hw_counters" / name).write_text(f"{value}\n")

    def add(self, i: int, name: str, rise: int) -> None:
        path = self.port(i) / "hw_counters" / name
        path.write_text(f"{int(path.read_text()) + rise}\n")


@pytest.fixture
def sysfs(tmp_path: Path) -> Sysfs:
    return Sysfs(tmp_path / "sys")


def configured(sysfs: Sysfs, **settings: object) -> AgentConfig:
    # An instance type with no EFA rate of its own unless a test names one: the
    # machine running the tests must not lend its DMI product name.
    settings = {"instance_type": "m5.large", **settings}
    env = {f"REMEDIATE_AGENT_{k.upper()}": str(v) for k, v in settings.items()}
    env["REMEDIATE_AGENT_SYSFS_ROOT"] = str(sysfs.root)
    return load_config(env=env)


class Cycles:
    """Check cycles NPD_INTERVAL apart, the state carried through JSON as the state file does."""

    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.saved: dict[str, Any] = {}
        self.now = START

    def run(self) -> EfaDegradedOutcome:
        outcome = evaluate(self.config, self.saved, self.now)
        self.saved = json.loads(json.dumps(outcome.state()))
        self.now += NPD_INTERVAL
        return outcome


def found(outcome: EfaDegradedOutcome) -> list[tuple[str | None, str | None]]:
    return [(p.device, p.what) for p in outcome.problems]


# ------------------------------------------------------------------ the formats


@pytest.mark.parametrize(
    ("text", "gbps", "width", "speed"),
    [
        (RATE_100, 100.0, 4, "EDR"),
        (RATE_200, 200.0, 4, "HDR"),
        (RATE_50, 50.0, 1, "HDR"),
        (RATE_2_5, 2.5, 1, "SDR"),
    ],
)
def test_the_kernels_rate_lines_for_efa_are_read(
    text: str, gbps: float, width: int, speed: str
) -> None:
    assert parse_rate(text) == (gbps, width, speed)


@pytest.mark.parametrize(
    "text", ["", "100", "100 Gb/sec", "x Gb/sec (4X EDR)", "100.7 Gb/sec (4X EDR)", "1 Gb/sec (X)"]
)
def test_what_is_not_the_kernels_rate_line_is_not_read(text: str) -> None:
    assert parse_rate(text) is None


def test_only_counters_that_mean_trouble_are_read_never_traffic() -> None:
    # Every counter the check may read is one the EFA driver has on a port.
    assert set(EFA_DEGRADATION_COUNTERS) <= set(PORT_COUNTERS)
    assert set(DEFAULT_EFA_DEGRADED_COUNTER_THRESHOLDS) <= set(EFA_DEGRADATION_COUNTERS)
    traffic = [c for c in PORT_COUNTERS if c.endswith(("_bytes", "_pkts", "_wrs"))]
    assert not set(traffic) & set(EFA_DEGRADATION_COUNTERS)
    assert "lifespan" not in EFA_DEGRADATION_COUNTERS
    assert "tx_drops" not in PORT_COUNTERS  # the driver counts drops on receive only


def test_a_traffic_counter_cannot_be_configured(sysfs: Sysfs) -> None:
    with pytest.raises(ConfigError, match="not an EFA error counter: tx_bytes"):
        configured(sysfs, efa_degraded_counter_thresholds='{"tx_bytes": 1}')


# ------------------------------------------------------------------ healthy


def test_healthy_ports_report_nothing(sysfs: Sysfs) -> None:
    cycles = Cycles(configured(sysfs, efa_degraded_expected_rate_gbps=200))
    for _ in range(30):
        for counter in PORT_COUNTERS:  # traffic flows, no error counter moves
            if counter not in EFA_DEGRADATION_COUNTERS:
                sysfs.add(0, counter, 10_000_000)
        outcome = cycles.run()
        assert (outcome.problems, outcome.unknowns) == ([], [])
    assert outcome.detail == (
        "2 EFA port(s); rate judged on 2 (expected 200 Gb/sec, configured); 4 error counter(s) read"
    )


def test_no_expected_rate_means_the_rate_is_not_judged(sysfs: Sysfs) -> None:
    sysfs.rate(0, RATE_2_5)
    cycles = Cycles(configured(sysfs))
    outcomes = [cycles.run() for _ in range(5)]
    assert all(o.problems == [] for o in outcomes)
    assert "rate not judged (no expected rate for m5.large)" in outcomes[-1].detail


def test_a_p5en_port_below_its_200_gbps_is_a_finding_under_a_driver_that_reports_speed(
    sysfs: Sysfs,
) -> None:
    # p5en: 200 per device (agent/config.py, AWS's aws-ofi-nccl); the driver's own
    # version string (efa_main.c: "3.1.0g").
    sysfs.driver("3.1.0g")
    sysfs.rate(1, RATE_100)
    cycles = Cycles(configured(sysfs, instance_type="p5en.48xlarge"))
    outcome = [cycles.run(), cycles.run()][-1]
    assert found(outcome) == [("rdmap129s0/1", "efa_port_rate")]
    assert "rate judged on 2 (expected 200 Gb/sec, p5en.48xlarge)" in outcome.detail


@pytest.mark.parametrize(
    ("driver", "why"),
    [
        ("2.12.1g", "p5en.48xlarge: EFA driver 2.12.1g prints 100 for every port"),
        ("in-tree", "p5en.48xlarge: EFA driver version 'in-tree' not understood"),
        (None, "p5en.48xlarge: EFA driver version unreadable"),
    ],
)
def test_an_old_or_unknown_driver_leaves_a_rate_above_100_unjudged(
    sysfs: Sysfs, driver: str | None, why: str
) -> None:
    # Before 2.13.0 every EFA port printed 100 (amzn-drivers c4c79265): judged, every
    # p5en port would read low.
    if driver is not None:
        sysfs.driver(driver)
    sysfs.rate(0, RATE_100)
    sysfs.rate(1, RATE_100)
    cycles = Cycles(configured(sysfs, instance_type="p5en.48xlarge"))
    outcomes = [cycles.run() for _ in range(3)]
    assert all(o.problems == [] for o in outcomes)
    assert f"rate not judged ({why}" in outcomes[-1].detail


def test_a_rate_of_100_is_judged_whatever_the_driver(sysfs: Sysfs) -> None:
    # Old drivers print 100 too, so an expectation of 100 never reads low by mistake.
    sysfs.rate(0, RATE_50)
    cycles = Cycles(configured(sysfs, instance_type="p5.48xlarge"))
    outcome = [cycles.run(), cycles.run()][-1]
    assert found(outcome) == [("rdmap128s0/1", "efa_port_rate")]
    assert "(expected 100 Gb/sec, p5.48xlarge)" in outcome.detail


def test_the_configured_rate_wins_and_a_type_can_be_added_or_turned_off(sysfs: Sysfs) -> None:
    sysfs.driver("2.13.0")
    config = configured(sysfs, instance_type="p5en.48xlarge", efa_degraded_expected_rate_gbps=50)
    assert config.expected_efa_rate() == (50, "configured")
    added = configured(
        sysfs,
        instance_type="p6-b200.48xlarge",
        efa_rate_by_instance_type='{"p6-b200.48xlarge": 400}',
    )
    assert added.expected_efa_rate() == (400, "p6-b200.48xlarge")
    assert added.efa_rate_by_instance_type["p5.48xlarge"] == 100  # merged over the defaults
    off = configured(
        sysfs, instance_type="p5.48xlarge", efa_rate_by_instance_type='{"p5.48xlarge": 0}'
    )
    assert off.expected_efa_rate() == (None, "p5.48xlarge: turned off (0)")
    with pytest.raises(ConfigError, match=r"over 100000 Gb/sec for p5\.48xlarge"):
        configured(sysfs, efa_rate_by_instance_type='{"p5.48xlarge": 100001}')


@pytest.mark.parametrize(
    ("text", "version"),
    [("3.1.0g", (3, 1, 0)), ("2.13.0", (2, 13, 0)), ("2.12.1g", (2, 12, 1))],
)
def test_the_efa_drivers_version_is_read(text: str, version: tuple[int, int, int]) -> None:
    assert efa_driver_version(text) == version


@pytest.mark.parametrize("text", ["", "3.1", "v3.1.0", "3.1.0-g", "3.1.0 g", "99999.1.0"])
def test_what_is_not_a_driver_version_is_not_read(text: str) -> None:
    assert efa_driver_version(text) is None


def test_a_node_without_efa_is_healthy(tmp_path: Path) -> None:
    config = load_config(env={"REMEDIATE_AGENT_SYSFS_ROOT": str(tmp_path)})
    outcome = evaluate(config, {}, START)
    assert (outcome.problems, outcome.detail) == ([], "no EFA ports")


# ------------------------------------------------------------------ port rate


def test_a_rate_below_the_expected_one_for_n_cycles_is_a_finding(sysfs: Sysfs) -> None:
    sysfs.rate(1, RATE_100)
    cycles = Cycles(configured(sysfs, efa_degraded_expected_rate_gbps=200))
    first = cycles.run()
    assert first.problems == []  # one reading is not sustained
    assert "EFA rdmap129s0/1 efa_port_rate: 100 Gb/sec, expected 200 Gb/sec (1 of 2 cycles)" in (
        first.log
    )
    second = cycles.run()
    assert found(second) == [("rdmap129s0/1", "efa_port_rate")]
    [problem] = second.problems
    assert degraded_text(problem) == (
        "Degraded on EFA rdmap129s0/1 [efa_port_rate]: 100 Gb/sec, expected 200 Gb/sec (2+ cycles)"
    )
    code, message = render(second.problems, [], ok_text="ok", max_bytes=1024)
    assert code == EXIT_PROBLEM
    assert "Degraded on EFA rdmap129s0/1 [efa_port_rate]" in message
    # The words do not change while the state does not (NPD updates on a changed message).
    assert render(cycles.run().problems, [], ok_text="ok", max_bytes=1024)[1] == message


def test_a_slow_port_clears_when_its_rate_is_back(sysfs: Sysfs) -> None:
    sysfs.rate(0, RATE_50)
    cycles = Cycles(configured(sysfs, efa_degraded_expected_rate_gbps=200))
    assert found([cycles.run(), cycles.run()][-1]) == [("rdmap128s0/1", "efa_port_rate")]
    sysfs.rate(0, RATE_200)
    back = cycles.run()
    assert back.problems == []
    assert "EFA rdmap128s0/1 efa_port_rate: back to 200 Gb/sec" in back.log
    assert back.state()["rate_streaks"] == {}


def test_an_unreadable_rate_neither_extends_nor_ends_a_streak(sysfs: Sysfs) -> None:
    sysfs.rate(0, RATE_100)
    cycles = Cycles(configured(sysfs, efa_degraded_expected_rate_gbps=200))
    cycles.run()
    sysfs.rate(0, "garbage\n")
    assert cycles.run().problems == []
    sysfs.rate(0, RATE_100)
    assert found(cycles.run()) == [("rdmap128s0/1", "efa_port_rate")]


# ------------------------------------------------------------------ counters


def test_a_counter_rising_above_its_rate_over_the_window_is_a_finding(sysfs: Sysfs) -> None:
    cycles = Cycles(configured(sysfs))
    outcomes = []
    for _ in range(12):
        sysfs.add(1, "retrans_timeout_events", 31)  # 62 a minute, threshold 60 a minute
        outcomes.append(cycles.run())
    # Judged once the readings span 300 s (11 readings 30 s apart), not before.
    assert all(o.problems == [] for o in outcomes[:10])
    assert found(outcomes[10]) == [("rdmap129s0/1", "efa_counter:retrans_timeout_events")]
    [problem] = outcomes[11].problems
    assert degraded_text(problem) == (
        "Degraded on EFA rdmap129s0/1 [efa_counter:retrans_timeout_events]: 60+/min,"
        " expected under 60/min (over 300+ s)"
    )
    assert any("+310 in 300 s (62.0/min)" in line for line in outcomes[10].log)


def test_a_counter_rising_slower_than_its_rate_is_not_a_finding(sysfs: Sysfs) -> None:
    cycles = Cycles(configured(sysfs))
    for n in range(40):
        if n % 4 == 0:
            sysfs.add(0, "rx_drops", 116)  # 58 a minute, threshold 60 a minute
        assert cycles.run().problems == []


def test_a_large_total_that_does_not_rise_is_not_a_finding(sysfs: Sysfs) -> None:
    # Counters are cumulative: a big total from last week is no rate now.
    sysfs.counter(0, "retrans_timeout_events", 5_000_000)
    cycles = Cycles(configured(sysfs))
    assert all(cycles.run().problems == [] for _ in range(20))


def test_what_a_remote_did_or_an_application_raised_degrades_no_node_by_default(
    sysfs: Sysfs,
) -> None:
    # A dead peer's gang sees unresponsive remotes; a job raises its own request
    # errors: neither points at this node, so neither is counted unless configured.
    noisy = (
        "unresponsive_remote_events",
        "impaired_remote_conn_events",
        "rdma_read_wr_err",
        "rdma_write_wr_err",
    )
    cycles = Cycles(configured(sysfs))
    for _ in range(15):
        for counter in noisy:
            sysfs.add(0, counter, 10_000)
        assert cycles.run().problems == []
    opted_in = Cycles(
        configured(sysfs, efa_degraded_counter_thresholds='{"unresponsive_remote_events": 60}')
    )
    outcomes = []
    for _ in range(11):
        sysfs.add(0, "unresponsive_remote_events", 10_000)
        outcomes.append(opted_in.run())
    assert found(outcomes[-1]) == [("rdmap128s0/1", "efa_counter:unresponsive_remote_events")]


def test_a_counter_reset_by_a_reboot_or_driver_reload_is_not_a_spike(sysfs: Sysfs) -> None:
    sysfs.counter(0, "retrans_timeout_events", 900)
    cycles = Cycles(configured(sysfs))
    for _ in range(11):
        cycles.run()
    sysfs.counter(0, "retrans_timeout_events", 3)  # went down: a reset
    outcome = cycles.run()
    assert outcome.problems == []
    assert "EFA rdmap128s0/1/retrans_timeout_events went down (900 -> 3): new baseline" in (
        outcome.log
    )
    assert outcome.state()["counters"]["rdmap128s0/1/retrans_timeout_events"] == [
        [cycles.now - NPD_INTERVAL, 3]
    ]
    # Back to its old total after the reset: 897 more, but from the new baseline and
    # not yet over a full span.
    sysfs.counter(0, "retrans_timeout_events", 900)
    assert cycles.run().problems == []


def test_a_rising_counter_clears_once_the_window_holds_no_rise(sysfs: Sysfs) -> None:
    cycles = Cycles(configured(sysfs))
    for _ in range(11):
        sysfs.add(0, "rx_drops", 1000)
        last = cycles.run()
    assert found(last) == [("rdmap128s0/1", "efa_counter:rx_drops")]
    quiet = [cycles.run() for _ in range(25)]  # no drop for 12.5 minutes
    assert quiet[-1].problems == []
    assert [o.problems == [] for o in quiet].index(True) > 0  # the burst fades, not at once


def test_a_threshold_of_zero_turns_a_counter_off(sysfs: Sysfs) -> None:
    cycles = Cycles(configured(sysfs, efa_degraded_counter_thresholds='{"rx_drops": 0}'))
    for _ in range(15):
        sysfs.add(0, "rx_drops", 100_000)
        assert cycles.run().problems == []


def test_damaged_state_is_dropped_not_fatal(sysfs: Sysfs) -> None:
    config = configured(sysfs, efa_degraded_expected_rate_gbps=200)
    saved = {
        "rate_streaks": {"x": {"times": ["a"], "observed": 1}, 5: [], "y": {"times": [True]}},
        "counters": {
            "rdmap128s0/1/rx_drops": [[1, -5], "x", [START, 2**70], [True, 1]],
            "rdmap128s0/1/tx_bytes": [[START, 1]],
        },
    }
    outcome = evaluate(config, saved, START)
    assert outcome.problems == []
    assert "rdmap128s0/1/tx_bytes" not in outcome.state()["counters"]


# ------------------------------------------------------------------ hostile input


def test_hostile_rate_and_counter_files_are_read_in_bounded_time(sysfs: Sysfs) -> None:
    config = configured(sysfs, efa_degraded_expected_rate_gbps=200)
    for text in (fill("9"), fill("100 Gb/sec ("), fill(" "), "9" * SIZE):
        sysfs.rate(0, text)
        for counter in EFA_DEGRADATION_COUNTERS:
            (sysfs.port(0) / "hw_counters" / counter).write_text(text)
        timed("efa_degraded.evaluate", lambda _: evaluate(config, {}, START), text)
        timed("efa_degraded.parse_rate", parse_rate, text)
        assert evaluate(config, {}, START).problems == []


def test_a_state_of_hostile_size_is_bounded(sysfs: Sysfs) -> None:
    config = configured(sysfs)
    pairs = [[START - 1, n] for n in range(100_000)]
    saved = {"counters": {"rdmap128s0/1/rx_drops": pairs}}
    outcome = evaluate(config, saved, START)
    assert len(outcome.state()["counters"]["rdmap128s0/1/rx_drops"]) <= efa_degraded.MAX_SAMPLES


# ------------------------------------------------------------------ the agent


def test_the_agent_reports_efa_degradation_as_its_own_check(node: Node) -> None:
    sysfs = Sysfs(node.sysfs, devices=1, rate=RATE_100)
    node.configure(efa_degraded_expected_rate_gbps=200, efa_degraded_rate_cycles=1)
    result = node.agent(check="efa-degraded")
    assert (result.code, result.stdout) == (
        EXIT_PROBLEM,
        "Degraded on EFA rdmap128s0/1 [efa_port_rate]: 100 Gb/sec, expected 200 Gb/sec (1+ cycles)",
    )
    sysfs.rate(0, RATE_200)
    result = node.agent(check="efa-degraded")
    assert result.code == EXIT_OK
    assert result.stdout.startswith("EFA degradation OK: 1 EFA port(s)")
    assert (node.state_dir / "efa-degraded.json").exists()


# ------------------------------------------------------------------ the NPD plugin config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "npd"


def test_efa_degradation_is_its_own_npd_condition_run_every_30_seconds() -> None:
    from agent.cli import _parser
    from agent.runner import KILL_GRACE

    monitor = json.loads((DEPLOY / "efa-degraded-monitor.json").read_text())
    gpu_degraded = json.loads((DEPLOY / "gpu-degraded-monitor.json").read_text())
    [condition] = monitor["conditions"]
    assert (condition["type"], condition["reason"]) == ("EfaDegraded", "EfaNotDegraded")
    [rule] = monitor["rules"]
    assert (rule["type"], rule["condition"], rule["reason"]) == (
        "permanent",
        "EfaDegraded",
        "EfaDegradationDetected",
    )
    assert monitor["source"] != gpu_degraded["source"]
    assert monitor["pluginConfig"] == gpu_degraded["pluginConfig"]
    args = _parser().parse_args(rule["args"])
    assert (args.command, args.check) == ("check", "efa-degraded")
    assert args.max_output_length == monitor["pluginConfig"]["max_output_length"]
    [other] = gpu_degraded["rules"]
    assert (rule["path"], rule["timeout"]) == (other["path"], other["timeout"])
    assert args.config == _parser().parse_args(other["args"]).config
    agent = load_config(str(DEPLOY / "agent.json"), env={})
    assert agent.lock_timeout + KILL_GRACE < agent.deadline < 25
    # Rate streaks fit in their window at NPD's interval; counter rates are judged within it.
    assert (agent.efa_degraded_rate_cycles - 1) * NPD_INTERVAL < agent.efa_degraded_window
    assert agent.efa_degraded_counter_min_span < agent.efa_degraded_window


def test_a_hostile_driver_version_file_is_read_in_bounded_time(sysfs: Sysfs) -> None:
    sysfs.driver("9" * SIZE)
    config = configured(sysfs, instance_type="p5en.48xlarge")
    timed("EFA driver version", config.expected_efa_rate)
    rate, why = config.expected_efa_rate()
    assert rate is None
    assert why.startswith("p5en.48xlarge: EFA driver version '9999")
    assert len(why) < 200
