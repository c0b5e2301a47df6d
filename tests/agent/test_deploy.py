"""The NPD plugin config and the DaemonSet agree with the agent, the catalog and the policy."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.cli import _parser
from agent.config import load_config
from agent.runner import KILL_GRACE
from gpu_remediation import catalog
from gpu_remediation.npd_message import NPD_EFA_REASON, NPD_GPU_REASON
from gpu_remediation.policy_loader import load_policy

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
MONITOR = json.loads((DEPLOY / "npd" / "gpu-health-monitor.json").read_text())
AGENT = json.loads((DEPLOY / "npd" / "agent.json").read_text())
# Issue 37: degradation is its own NPD plugin config and condition, apart from faults.
DEGRADED = json.loads((DEPLOY / "npd" / "gpu-degraded-monitor.json").read_text())
EFA_DEGRADED = json.loads((DEPLOY / "npd" / "efa-degraded-monitor.json").read_text())
DOCS = {d["kind"]: d for d in yaml.safe_load_all((DEPLOY / "agent-daemonset.yaml").read_text())}


def seconds(duration: str) -> float:
    match = re.fullmatch(r"(\d+)s", duration)
    assert match, duration
    return float(match.group(1))


def rule(name: str) -> dict[str, Any]:
    [found] = [r for r in MONITOR["rules"] if r["args"][2] == name]
    return found


def test_npd_runs_the_checks_every_30_seconds_within_its_timeouts() -> None:
    config = MONITOR["pluginConfig"]
    assert MONITOR["plugin"] == "custom"
    assert config["invoke_interval"] == "30s"
    assert seconds(config["timeout"]) < seconds(config["invoke_interval"])
    for each in MONITOR["rules"]:
        # NPD refuses a rule timeout above the global one.
        assert seconds(each["timeout"]) <= seconds(config["timeout"])
    # A new finding must reach the condition although its status stays True.
    assert config["enable_message_change_based_condition_update"] is True


def test_conditions_are_the_ones_the_catalog_and_the_policy_watch() -> None:
    # The fault conditions in one plugin config, degradation (GpuDegraded) in its own.
    conditions = {
        c["type"]
        for c in MONITOR["conditions"] + DEGRADED["conditions"] + EFA_DEGRADED["conditions"]
    }
    assert conditions == set(catalog.NPD_CONDITIONS)
    watched = {c.type: c.problem_statuses for c in load_policy().triggers.conditions}
    for condition in conditions:
        assert watched[condition] == ["True"]
    assert rule("gpu")["condition"] == catalog.NPD_GPU_CONDITION
    assert rule("gpu")["reason"] == NPD_GPU_REASON
    assert rule("efa")["condition"] == catalog.NPD_EFA_CONDITION
    assert rule("efa")["reason"] == NPD_EFA_REASON
    # Counter bursts are warnings: an event, never the condition.
    assert rule("efa-counters")["type"] == "temporary"
    assert rule("efa-counters")["reason"] in catalog.NPD_EFA_REASONS


@pytest.mark.parametrize("check", ["gpu", "efa", "efa-counters"])
def test_rule_arguments_are_a_valid_agent_command_with_npds_output_limit(check: str) -> None:
    args = _parser().parse_args(rule(check)["args"])
    assert (args.command, args.check) == ("check", check)
    assert args.max_output_length == MONITOR["pluginConfig"]["max_output_length"]
    assert rule(check)["path"] == "/usr/local/bin/remediate-agent"


def test_agent_config_is_valid_and_its_deadline_fits_npds_timeout() -> None:
    config = load_config(str(DEPLOY / "npd" / "agent.json"), env={})
    assert config.deadline < seconds(rule("gpu")["timeout"])
    # The tools run concurrently: the slowest one plus the kill grace must fit.
    assert max(config.dcgm_timeout, config.nvidia_smi_timeout) + KILL_GRACE < config.deadline
    assert config.kernel_log_kind == "kmsg"


def test_daemonset_carries_the_same_configs_as_deploy_npd() -> None:
    data = DOCS["ConfigMap"]["data"]
    assert json.loads(data["gpu-health-monitor.json"]) == MONITOR
    assert json.loads(data["gpu-degraded-monitor.json"]) == DEGRADED
    assert json.loads(data["efa-degraded-monitor.json"]) == EFA_DEGRADED
    assert json.loads(data["agent.json"]) == AGENT


def test_npd_loads_both_plugin_configs() -> None:
    [npd] = DOCS["DaemonSet"]["spec"]["template"]["spec"]["containers"]
    [flag] = [a for a in npd["command"] if a.startswith("--config.custom-plugin-monitor=")]
    loaded = flag.split("=", 1)[1].split(",")
    assert loaded == [
        "/etc/remediate-agent/gpu-health-monitor.json",
        "/etc/remediate-agent/gpu-degraded-monitor.json",
        "/etc/remediate-agent/efa-degraded-monitor.json",
    ]


def test_daemonset_mounts_host_paths_read_only_except_the_state() -> None:
    spec = DOCS["DaemonSet"]["spec"]["template"]["spec"]
    [container] = spec["containers"]
    host_paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    writable = {name for name in host_paths if not mounts[name].get("readOnly")}
    assert writable == {"state"}
    assert host_paths["state"] == AGENT["state_dir"] == mounts["state"]["mountPath"]
    assert mounts["kmsg"]["mountPath"] == AGENT["kernel_log"].removeprefix("kmsg:")
    assert AGENT["sysfs_root"] == mounts["sys"]["mountPath"]
    assert "hostNetwork" not in spec
    assert "hostPID" not in spec
    assert {"operator": "Exists"} in spec["tolerations"]
    config_flag = f"--config.custom-plugin-monitor={mounts['config']['mountPath']}/"
    assert any(arg.startswith(config_flag) for arg in container["command"])


def test_daemonset_gives_npd_only_its_own_role() -> None:
    # What the role grants, and the admission policy keeping it to its own node:
    # tests/deploy/test_agent_admission.py.
    binding = DOCS["ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == DOCS["ClusterRole"]["metadata"]["name"]
    [subject] = binding["subjects"]
    pod = DOCS["DaemonSet"]["spec"]["template"]["spec"]
    assert subject["name"] == pod["serviceAccountName"]


# ------------------------------------------------- issue 37: GPUs that work, slowly


def test_gpu_degradation_is_its_own_condition_apart_from_the_fault_conditions() -> None:
    [condition] = DEGRADED["conditions"]
    assert (condition["type"], condition["reason"]) == ("GpuDegraded", "GpuNotDegraded")
    assert condition["type"] not in {c["type"] for c in MONITOR["conditions"]}
    [each] = DEGRADED["rules"]
    assert (each["type"], each["condition"], each["reason"]) == (
        "permanent",
        "GpuDegraded",
        "GpuDegradationDetected",
    )
    assert DEGRADED["plugin"] == "custom"
    assert DEGRADED["source"] != MONITOR["source"]


def test_the_degradation_rule_is_a_valid_agent_command_with_npds_output_limit() -> None:
    [each] = DEGRADED["rules"]
    args = _parser().parse_args(each["args"])
    assert (args.command, args.check) == ("check", "gpu-degraded")
    assert args.max_output_length == DEGRADED["pluginConfig"]["max_output_length"]
    assert args.config == _parser().parse_args(rule("gpu")["args"]).config
    assert each["path"] == rule("gpu")["path"]


def test_the_degradation_check_runs_every_30_seconds_within_its_timeouts() -> None:
    config = DEGRADED["pluginConfig"]
    assert config["invoke_interval"] == MONITOR["pluginConfig"]["invoke_interval"] == "30s"
    [each] = DEGRADED["rules"]
    assert (
        seconds(each["timeout"]) <= seconds(config["timeout"]) < seconds(config["invoke_interval"])
    )
    assert config["enable_message_change_based_condition_update"] is True
    agent = load_config(str(DEPLOY / "npd" / "agent.json"), env={})
    assert agent.nvidia_smi_timeout + KILL_GRACE < agent.deadline < seconds(each["timeout"])


def test_the_degradation_streaks_fit_in_their_window_at_npds_interval() -> None:
    # N consecutive readings 30 s apart span (N - 1) x 30 s: within the window, or never reported.
    agent = load_config(str(DEPLOY / "npd" / "agent.json"), env={})
    interval = seconds(DEGRADED["pluginConfig"]["invoke_interval"])
    longest = max(agent.degraded_pcie_cycles, agent.degraded_clock_event_cycles)
    assert (longest - 1) * interval < agent.degraded_window
