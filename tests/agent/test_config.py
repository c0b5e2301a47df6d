"""Agent settings: file, environment and flags, each bad value named with where it came from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.config import ConfigError, load_config


def write(tmp_path: Path, settings: dict[str, object]) -> str:
    path = tmp_path / "agent.json"
    path.write_text(json.dumps(settings))
    return str(path)


def test_defaults_match_the_shipped_npd_config() -> None:
    config = load_config(env={})
    assert (config.max_output_length, config.kernel_log_kind, config.kernel_log_target) == (
        1024,
        "kmsg",
        "/dev/kmsg",
    )


def test_flags_win_over_environment_over_file(tmp_path: Path) -> None:
    path = write(tmp_path, {"dcgm_timeout": 3, "nvidia_smi_timeout": 4, "state_dir": "/file"})
    env = {"REMEDIATE_AGENT_DCGM_TIMEOUT": "5", "REMEDIATE_AGENT_STATE_DIR": "/env"}
    config = load_config(path, env=env, overrides={"state_dir": "/flag", "kernel_log": None})
    assert (config.nvidia_smi_timeout, config.dcgm_timeout, config.state_dir) == (4, 5, "/flag")


def test_instance_tables_merge_over_the_defaults(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, {"efa_by_instance_type": {"p6.48xlarge": 8}}), env={})
    assert config.efa_by_instance_type["p6.48xlarge"] == 8
    assert config.efa_by_instance_type["p5.48xlarge"] == 32


def test_instance_type_is_read_from_dmi(tmp_path: Path) -> None:
    dmi = tmp_path / "product_name"
    dmi.write_text("p5en.48xlarge\n")
    config = load_config(env={"REMEDIATE_AGENT_INSTANCE_TYPE_PATH": str(dmi)})
    assert config.expected_efa_count() == (16, "p5en.48xlarge")
    assert config.expected_gpu_count() == (8, "p5en.48xlarge")


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({"file": {"nvidia_smi_timeout": "later"}}, "nvidia_smi_timeout: expected a number"),
        ({"file": {"no_such_setting": 1}}, "unknown setting 'no_such_setting'"),
        ({"env": {"REMEDIATE_AGENT_DCGM_ENABLED": "perhaps"}}, "environment: dcgm_enabled"),
        ({"file": {"max_output_length": 20}}, "max_output_length: must be between 40 and 4096"),
        ({"file": {"deadline": 0}}, "deadline: must be greater than 0"),
        ({"file": {"expected_gpus": 99}}, "expected_gpus: must be between 0 and 64"),
        ({"file": {"efa_by_instance_type": {"p5": -1}}}, "p5: must not be negative"),
    ],
)
def test_bad_values_are_refused_naming_the_setting(
    tmp_path: Path, source: dict[str, dict[str, object]], message: str
) -> None:
    path = write(tmp_path, source.get("file", {}))
    env = {k: str(v) for k, v in source.get("env", {}).items()}
    with pytest.raises(ConfigError, match=message):
        load_config(path, env=env)


def test_unreadable_config_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "agent.json").write_text("{not json")
    with pytest.raises(ConfigError, match="config file"):
        load_config(str(tmp_path / "agent.json"), env={})


@pytest.mark.parametrize(
    ("value", "kind", "target"),
    [
        ("journal", "journal", ""),
        ("journal:/var/log/journal", "journal", "/var/log/journal"),
        ("kmsg", "kmsg", "/dev/kmsg"),
        ("file:/var/log/kern.log", "file", "/var/log/kern.log"),
        ("/var/log/messages", "file", "/var/log/messages"),
    ],
)
def test_kernel_log_sources(value: str, kind: str, target: str) -> None:
    config = load_config(env={"REMEDIATE_AGENT_KERNEL_LOG": value})
    assert (config.kernel_log_kind, config.kernel_log_target) == (kind, target)
