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
    # -q, then NVLink's links and counters, which -q does not print.
    assert node.tools.calls("nvidia-smi") == ["-q", "nvlink -s", "nvlink -e"] * 2
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


def test_an_nvlink_that_goes_down_is_reported_as_npd_runs_the_check(node: Node) -> None:
    # Real: an A100 node's `nvlink -s` with all 12 links at 25 GB/s, then the same GPU
    # as a real capture of an A100 whose links are all down (Azure's health checks).
    up = real("nvsmi_nvlink_s_a100_tab_azurehpc_good.txt").decode().replace("GPU 7:", "GPU 0:")
    down = (
        real("nvsmi_nvlink_s_a100_all_inactive_azurehpc.txt").decode().replace("GPU 6:", "GPU 0:")
    )
    a100 = real("nvsmi_q_a100sxm4x4_555_dram_corr353_remap_pending_thamada.txt").decode()
    for name, text in (("q", a100), ("s", up), ("e", "")):
        (node.tools.bin / f"smi-{name}.txt").write_text(text)
    node.tools.script(
        "nvidia-smi",
        'd="$(dirname "$0")"\n'
        'case "$*" in "-q") cat "$d/smi-q.txt";; "nvlink -s") cat "$d/smi-s.txt";;'
        ' *) cat "$d/smi-e.txt";; esac\n',
    )
    assert node.agent(check="gpu-degraded").code == 0
    (node.tools.bin / "smi-s.txt").write_text(down)
    assert node.agent(check="gpu-degraded").code == 0  # one reading is not yet a finding
    again = node.agent(check="gpu-degraded")
    assert (again.code, again.stdout) == (
        1,
        "Degraded on GPU 0 (0000:68:00) [nvlink_down]: 0 of 12 up, expected all up (2+ cycles)",
    )
