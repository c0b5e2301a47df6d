"""``remediate-agent check --check efa`` and ``--check efa-counters`` against a fake sysfs."""

from __future__ import annotations

from pathlib import Path

from tests.agent.conftest import Node

COUNTERS = ("rdma_read_wr_err", "rx_drops", "retrans_pkts")


def efa_sysfs(
    root: Path,
    devices: int,
    *,
    registered: int | None = None,
    down: tuple[int, ...] = (),
    module: bool = True,
) -> None:
    """PCI functions, RDMA devices with one port each, and the efa module, as sysfs shows them."""
    pci = root / "bus" / "pci" / "devices"
    gpu = pci / "0000:53:00.0"
    gpu.mkdir(parents=True)
    (gpu / "vendor").write_text("0x10de\n")
    (gpu / "device").write_text("0x2330\n")
    for i in range(devices):
        function = pci / f"0000:{0x80 + i:02x}:00.0"
        function.mkdir()
        (function / "vendor").write_text("0x1d0f\n")
        (function / "device").write_text("0xefa1\n")
    for i in range(devices if registered is None else registered):
        device = root / "class" / "infiniband" / f"rdmap{0x80 + i}s0"
        (device / "device").mkdir(parents=True)
        (device / "device" / "vendor").write_text("0x1d0f\n")
        port = device / "ports" / "1"
        (port / "hw_counters").mkdir(parents=True)
        (port / "state").write_text("1: DOWN\n" if i in down else "4: ACTIVE\n")
        (port / "phys_state").write_text("3: Disabled\n" if i in down else "5: LinkUp\n")
        for counter in COUNTERS:
            (port / "hw_counters" / counter).write_text("0\n")
    if module:
        (root / "module" / "efa").mkdir(parents=True)


def set_counter(root: Path, device: int, counter: str, value: int) -> None:
    path = root / "class" / "infiniband" / f"rdmap{0x80 + device}s0" / "ports" / "1"
    (path / "hw_counters" / counter).write_text(f"{value}\n")


def test_healthy_efa_exits_0(node: Node) -> None:
    efa_sysfs(node.sysfs, 32)
    result = node.agent(check="efa")
    assert (result.code, result.stdout) == (0, "EFA OK: 32 EFA devices, 32 ports")
    assert node.tools.calls("fi_info") == ["-p efa"]


def test_no_efa_on_an_instance_type_without_it_is_healthy(node: Node) -> None:
    node.configure(instance_type="g5.48xlarge")
    result = node.agent(check="efa")
    assert (result.code, result.stdout) == (
        0,
        "EFA OK: no EFA devices, none expected (g5.48xlarge)",
    )


def test_wrong_device_count_is_named_with_the_instance_type(node: Node) -> None:
    efa_sysfs(node.sysfs, 31)
    result = node.agent(check="efa")
    assert (result.code, result.stdout) == (
        1,
        "EFA device count: 31 EFA devices, expected 32 (p5.48xlarge)",
    )


def test_device_not_registered_with_the_rdma_stack_is_a_device_count_problem(node: Node) -> None:
    efa_sysfs(node.sysfs, 32, registered=30)
    result = node.agent(check="efa")
    assert result.code == 1
    assert result.stdout == (
        "EFA device count: 30 of 32 EFA devices registered with the RDMA stack"
    )


def test_missing_provider_and_module_are_provider_problems(node: Node) -> None:
    efa_sysfs(node.sysfs, 32, module=False)
    node.tools.respond("fi_info", "fi_getinfo: -61 (No data available)\n", exit_code=61)
    result = node.agent(check="efa")
    assert result.code == 1
    assert result.stdout.startswith("EFA provider: efa kernel module not loaded; EFA provider: ")
    assert "fi_info failed with exit code 61" in result.stdout


def test_hanging_fi_info_is_unknown(node: Node) -> None:
    efa_sysfs(node.sysfs, 32)
    node.tools.hang("fi_info", 30)
    node.configure(fi_info_timeout=0.5)
    result = node.agent(check="efa")
    assert (result.code, result.stdout) == (
        2,
        "EFA provider unknown: fi_info hung: no answer within 0.5 s, killed",
    )


def test_link_down_names_the_device_and_port(node: Node) -> None:
    efa_sysfs(node.sysfs, 32, down=(3,))
    result = node.agent(check="efa")
    assert (result.code, result.stdout) == (
        1,
        "EFA link (rdmap131s0/1): state DOWN, physical state Disabled",
    )


def test_counter_bursts_since_the_last_run_are_reported_once(node: Node) -> None:
    efa_sysfs(node.sysfs, 4)
    first = node.agent(check="efa-counters")
    assert (first.code, first.stdout) == (
        0,
        "EFA counters OK: baseline of 12 EFA counters recorded",
    )
    # AWS's bucket of 100 (agent/config.py): 101 is a burst, 100 is not.
    set_counter(node.sysfs, 1, "rdma_read_wr_err", 101)
    set_counter(node.sysfs, 1, "rx_drops", 100)
    second = node.agent(check="efa-counters")
    assert (second.code, second.stdout) == (
        1,
        "EFA counters (rdmap129s0/1): rdma_read_wr_err +101",
    )
    assert node.agent(check="efa-counters").code == 0


def test_a_counter_that_went_down_starts_a_new_baseline(node: Node) -> None:
    efa_sysfs(node.sysfs, 1)
    set_counter(node.sysfs, 0, "rdma_read_wr_err", 5000)
    assert node.agent(check="efa-counters").code == 0
    set_counter(node.sysfs, 0, "rdma_read_wr_err", 2)
    assert node.agent(check="efa-counters").code == 0
    node.reboot()
    set_counter(node.sysfs, 0, "rdma_read_wr_err", 900)
    assert node.agent(check="efa-counters").code == 0  # a new boot is a new baseline
