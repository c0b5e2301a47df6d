"""The simulator's assumptions a user may replace in one file (``--model FILE``, issue 36).

How long things take on the fleet (:class:`~simulator.fleet.clock.Durations`), what a
launch meets (:class:`~simulator.fleet.capacity.CapacityModel`: launch-time spread,
capacity shortages, Capacity Block relaunches), how training jobs run
(:class:`~simulator.fleet.config.WorkloadConfig`) and how the people who answer tickets
behave (:class:`~simulator.fleet.operator_config.OperatorConfig`) each have defaults,
sourced or marked as assumptions where they are defined. A comparison's verdict
may turn on them, so a user with their own numbers states them in a YAML file that holds
only what it changes::

    durations:
      node_launch: 20m      # our p5s take this long to be Ready (the median)
      reboot: 8m
    capacity:
      launch_sigma: 0.5
      insufficient_capacity_probability: 0.05
    workloads:
      job_duration: 12h
      restart_delay: 15m
    operator:
      staff: 1

Each section is validated by the model it changes, so an unknown or bad field is named
with its section; fields left out keep their defaults. The fault mix has a file of its own
(``--fault-mix``); the gang size is ``--job-nodes`` (sweepable), not this file's; the
shortage probability may also be given as ``--capacity-shortage`` (sweepable), which wins.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from simulator.fleet.capacity import CapacityModel
from simulator.fleet.clock import Durations
from simulator.fleet.config import FleetConfig, WorkloadConfig
from simulator.fleet.operator_config import OperatorConfig

MAX_MODEL_BYTES = 64 * 1024
"""A model file is a few lines; a bigger one is a mistake, refused before it is parsed."""


SECTIONS = ("durations", "capacity", "workloads", "operator")
"""A model file's sections, in the order the report lists them."""


class ModelError(ValueError):
    """A model file that cannot be used: the message names the file, section and field."""


class SimModel(BaseModel):
    """A model file: the sections it changes, each holding only the fields it sets."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    durations: Durations | None = None
    capacity: CapacityModel | None = None
    workloads: WorkloadConfig | None = None
    operator: OperatorConfig | None = None

    @field_validator("workloads")
    @classmethod
    def _no_gang_size(cls, value: WorkloadConfig | None) -> WorkloadConfig | None:
        if value is not None and "job_nodes" in value.model_fields_set:
            raise ValueError("job_nodes is the comparison's --job-nodes (it can be swept)")
        return value

    def changes(self) -> dict[str, dict[str, Any]]:
        """What the file sets, by section, as written (the report lists it)."""
        out: dict[str, dict[str, Any]] = {}
        for section in SECTIONS:
            model = getattr(self, section)
            if model is not None:
                out[section] = {
                    name: getattr(model, name) for name in sorted(model.model_fields_set)
                }
        return out

    def apply(self, config: FleetConfig) -> FleetConfig:
        """The fleet with this file's values over its own.

        Raises:
            ModelError: The file changes workloads or the operator of a fleet that has
                none (``--no-workloads``, ``--no-operator``).
        """
        update: dict[str, Any] = {}
        changes = self.changes()
        for section in ("durations", "capacity"):
            if section in changes:
                current = getattr(config, section)
                update[section] = current.model_copy(update=changes[section])
        for section in ("workloads", "operator"):
            if section not in changes:
                continue
            current = getattr(config, section)
            if current is None:
                raise ModelError(
                    f"{section}: the model changes it, but this run has none (--no-{section})"
                )
            if section == "workloads":
                update[section] = _workloads(current, changes[section])
            else:
                update[section] = current.model_copy(update=changes[section])
        return config.model_copy(update=update)


def _workloads(current: WorkloadConfig, changes: dict[str, Any]) -> WorkloadConfig:
    """The workload with the file's changes, checked as a whole (gangs against job_nodes)."""
    values = {name: getattr(current, name) for name in current.model_fields_set}
    if "gangs" in changes:
        if "job_nodes" in values and current.gangs is None:
            raise ModelError("workloads.gangs: this run's jobs have --job-nodes nodes; give one")
        values.pop("job_nodes", None)
    try:
        return WorkloadConfig.model_validate(values | changes)
    except ValidationError as err:
        raise ModelError(f"workloads: {err.errors()[0]['msg']}") from err


def load_model(path: Path) -> SimModel:
    """Read and validate a model file.

    Raises:
        ModelError: Missing, too big, not YAML, not a mapping, or a bad field (named
            with its section).
    """
    try:
        size = path.stat().st_size
    except OSError as err:
        raise ModelError(f"{path}: {err.strerror or err}") from err
    if size > MAX_MODEL_BYTES:
        raise ModelError(f"{path}: {size} bytes, more than a model file's {MAX_MODEL_BYTES}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise ModelError(f"{path}: not a readable YAML file ({err})") from err
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ModelError(f"{path}: expected a mapping of sections ({', '.join(SECTIONS)})")
    try:
        return SimModel.model_validate(data)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in e['loc'])}: {e['msg']}" for e in err.errors()
        )
        raise ModelError(f"{path}: {problems}") from err
