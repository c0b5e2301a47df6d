"""``remediate-agent check --check gpu-degraded`` as NPD runs it, on real ``nvidia-smi -q``."""

from __future__ import annotations

import json

from tests.agent.conftest import Node
from tests.agent.test_real_nvidia_smi import in_gpu, real

H100_183 = "nvsmi_q_h100x8_535_gpud.txt"  # GPU 2 (0000:75:00): HW Power Brake, SW Thermal Active


def cleared() -> str:
    """Derived: the same capture with GPU 2's two reasons printed Not Active again."""
    text = real(H100_183)
    for old in (
        b"HW Power Brake Slowdown       : Active",
        b"SW Thermal Slowdown               : Active",
    ):
        text = in_gpu(text, 2, old, old.replace(b": Active", b": Not Active"))
    return text.decode()


def test_the_check_as_npd_runs_it_reports_after_n_cycles_and_clears(node: Node) -> None:
    node.configure(degraded_clock_event_cycles=2)
    node.tools.respond("nvidia-smi", real(H100_183).decode())
    first = node.agent(check="gpu-degraded")
    assert (first.code, first.stdout) == (
        0,
        "GPU degradation OK: 8 GPU(s) read; PCIe width judged on 8 (P0),"
        " generation on 0 (P0, busy)",
    )
    assert "clock_event:hw_power_brake_slowdown: Active, expected Not Active (1 of 2 cycles)" in (
        first.stderr
    )
    second = node.agent(check="gpu-degraded")
    assert second.code == 1
    assert second.stdout == (
        "Degraded on GPU 2 (0000:75:00) [clock_event:hw_power_brake_slowdown]: Active, expected"
        " Not Active (2+ cycles); Degraded on GPU 2 (0000:75:00) [clock_event:sw_thermal_slowdown]:"
        " Active, expected Not Active (2+ cycles)"
    )
    assert node.tools.calls("nvidia-smi") == ["-q", "-q"]
    node.reboot()
    assert node.agent(check="gpu-degraded").code == 0  # a new boot forgets the streaks
    assert node.agent(check="gpu-degraded").code == 1
    node.tools.respond("nvidia-smi", cleared())
    assert node.agent(check="gpu-degraded").code == 0
    shown = node.agent(
        "state", "show", "--check", "gpu-degraded", "--config", str(node.config_file())
    )
    assert shown.code == 0
    assert json.loads(shown.stdout)["streaks"] == {}
