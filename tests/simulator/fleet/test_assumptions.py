"""A model file replaces the simulator's assumptions it names, and only those (issue 36)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from simulator.fleet.assumptions import MAX_MODEL_BYTES, ModelError, load_model
from simulator.fleet.capacity import CapacityModel
from simulator.fleet.clock import Durations
from simulator.fleet.config import FleetConfig, WorkloadConfig
from simulator.fleet.operator_config import OperatorConfig

pytestmark = pytest.mark.unit


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "model.yaml"
    path.write_text(text)
    return path


def test_a_model_changes_the_fields_it_names_and_keeps_every_other_default(
    tmp_path: Path,
) -> None:
    model = load_model(
        _file(
            tmp_path,
            "durations: {node_launch: 20m, reboot: 8m}\n"
            "workloads: {job_duration: 12h}\n"
            "operator: {staff: 1}\n",
        )
    )
    assert model.changes() == {
        "durations": {"node_launch": timedelta(minutes=20), "reboot": timedelta(minutes=8)},
        "workloads": {"job_duration": timedelta(hours=12)},
        "operator": {"staff": 1},
    }
    fleet = FleetConfig(
        workloads=WorkloadConfig(job_nodes=8, restart_delay=timedelta(minutes=7)),
        operator=OperatorConfig(),
    )
    changed = model.apply(fleet)
    assert changed.durations.node_launch == timedelta(minutes=20)
    assert changed.durations.reboot == timedelta(minutes=8)
    assert changed.durations.gpu_reset == Durations().gpu_reset
    assert changed.workloads is not None
    assert changed.workloads.job_duration == timedelta(hours=12)
    # What the fleet had already set, and the file does not name, stays.
    assert changed.workloads.job_nodes == 8
    assert changed.workloads.restart_delay == timedelta(minutes=7)
    assert changed.operator == OperatorConfig(staff=1)


def test_a_capacity_section_changes_the_fields_it_names(tmp_path: Path) -> None:
    model = load_model(
        _file(
            tmp_path,
            "capacity: {launch_sigma: 0.5, insufficient_capacity_probability: 0.1, "
            "capacity_block_relaunch: 8m}\n",
        )
    )
    assert model.changes() == {
        "capacity": {
            "capacity_block_relaunch": timedelta(minutes=8),
            "insufficient_capacity_probability": 0.1,
            "launch_sigma": 0.5,
        }
    }
    changed = model.apply(FleetConfig())
    assert changed.capacity == CapacityModel(
        launch_sigma=0.5,
        insufficient_capacity_probability=0.1,
        capacity_block_relaunch=timedelta(minutes=8),
    )
    assert changed.capacity.capacity_retry == CapacityModel().capacity_retry
    assert changed.durations == Durations()


def test_an_empty_model_changes_nothing(tmp_path: Path) -> None:
    fleet = FleetConfig()
    assert load_model(_file(tmp_path, "")).apply(fleet) == fleet


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("durations: {node_lunch: 20m}\n", r"durations\.node_lunch: Extra inputs"),
        ("durations: {reboot: soon}\n", r"durations\.reboot"),
        ("workloads: {job_duration: 0s}\n", r"workloads\.job_duration"),
        ("workloads: {job_nodes: 64}\n", "job_nodes is the comparison's --job-nodes"),
        ("capacity: {shortage: 0.1}\n", r"capacity\.shortage: Extra inputs"),
        (
            "capacity: {insufficient_capacity_probability: 2}\n",
            r"capacity\.insufficient_capacity_probability: Input should be less than or equal to 1",
        ),
        ("capacity: {capacity_retry: 0s}\n", r"capacity\.capacity_retry"),
        ("costs: {instance_hour: 98}\n", r"costs: Extra inputs"),
        ("- durations\n", "expected a mapping of sections"),
        ("durations: [\n", "not a readable YAML file"),
    ],
)
def test_a_bad_model_names_its_file_section_and_field(
    tmp_path: Path, text: str, message: str
) -> None:
    path = _file(tmp_path, text)
    with pytest.raises(ModelError, match=message) as caught:
        load_model(path)
    assert str(path) in str(caught.value)


def test_a_missing_or_oversized_model_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"nope\.yaml"):
        load_model(tmp_path / "nope.yaml")
    big = _file(tmp_path, "#" * (MAX_MODEL_BYTES + 1))
    with pytest.raises(ModelError, match="more than a model file's"):
        load_model(big)


def test_a_model_of_workloads_for_a_fleet_without_jobs_is_refused(tmp_path: Path) -> None:
    model = load_model(_file(tmp_path, "workloads: {restart_delay: 1m}\n"))
    with pytest.raises(ModelError, match=r"this run has none \(--no-workloads\)"):
        model.apply(FleetConfig(workloads=None))
