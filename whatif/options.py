"""What ``remediate compare`` runs: the demo's fleet and fault options, plus the policies.

Everything is checked here, before any process starts: the fleet (pools, scenario,
fault mix), the duration and each policy (a baseline name or a policy file). A
mistake raises :class:`CompareError` naming the option, file and field.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from demo.chaos.driver import KINDS, ChaosKind, parse_kinds
from demo.run import DemoError, DemoOptions, fleet_config
from gpu_remediation.policy import Duration, Policy
from gpu_remediation.policy_loader import PolicyError, load_policy
from policies import BASELINES, BUILT_IN, load_baseline
from simulator.fleet import FaultMix, FleetConfig, Scenario, ScenarioError, parse_pools
from simulator.fleet.assumptions import ModelError, load_model
from simulator.fleet.config import FLEET_BACKOFF_LIMIT, FLEET_GANGS, AdmissionSimConfig
from simulator.fleet.faults import MEAN_LEMON_FACTOR, LemonModel
from simulator.fleet.operator_config import OperatorConfig
from whatif.server_time import DEFAULT_STEP

SHARED_KINDS: tuple[ChaosKind, ...] = ("server_restart", "receiver_kill")
"""Chaos kinds a comparison cannot inject: its policies share one Temporal server (a
restart would hit every policy running beside), and its lanes run no alert receiver."""
CHAOS_KINDS: tuple[ChaosKind, ...] = tuple(k for k in KINDS if k not in SHARED_KINDS)
"""What ``--chaos-kinds all`` (the default) injects into each policy's run."""
DEFAULT_CHAOS_FAULTS = 2

MAX_NODE_LAUNCH = timedelta(days=1)
"""The longest launch-to-Ready time ``--node-launch`` takes: past it a pool is short, which
is a capacity model's to say (issue 36), not a launch time's."""

DEFAULT_DURATION = timedelta(hours=6)
"""Without --duration and --scenario: enough simulated time for a few operator round trips."""


class CompareError(Exception):
    """Bad input: the message names the option (and the file and field)."""


class CompareOptions(BaseModel):
    """Everything ``remediate compare`` can be told."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    nodes: int = Field(default=40, ge=1, le=10_000)
    pools: str = "h100,p5:no-reset"
    scenario: Path | None = None
    fault_mix: str | None = "llama3"
    fault_multiplier: float = Field(default=1.0, ge=0)
    policies: str = ",".join(BASELINES)
    time_factor: float = Field(default=600.0, gt=0, le=100_000)
    duration: Duration | None = None
    seed: int = 0
    json_output: bool = False
    report: Path | None = None
    workloads: bool = True
    job_nodes: int | None = Field(default=None, ge=1)
    """Nodes of every training job; None: the large fleet's mix of gang sizes
    (``FLEET_GANGS``) with its retry budget (``FLEET_BACKOFF_LIMIT``)."""
    model: Path | None = None
    """A model file (``simulator.fleet.assumptions``): durations, workloads and the
    operator the simulator assumes, replaced where the file says."""
    node_launch: Duration | None = None
    """Karpenter's NodeClaim-created-to-Ready time on the simulated fleet; None: the
    simulator's default (``simulator.fleet.clock.Durations.node_launch``)."""
    capacity_shortage: float | None = None
    """The chance a Karpenter launch attempt finds no capacity (EC2
    InsufficientInstanceCapacity) on the simulated fleet; None: the model file's or the
    simulator's default (``simulator.fleet.capacity.CapacityModel``, 0: no public rate)."""
    slow_fault_multiplier: float | None = Field(default=None, ge=0, le=1000)
    """Times the fault mix's own rates of its extra (slow) kinds, ``extra_rates`` (issue
    37); None: the mix's rates."""
    lemon_share: float | None = None
    """The share of the fleet's slots whose host is a lemon (``FaultMix.lemons``), each
    faulting the mix's factor (or ``MEAN_LEMON_FACTOR``) times as often; 0: none; None:
    the fault mix's own."""
    operator: bool = True
    settle_timeout: float = Field(default=60.0, ge=0)
    refresh_interval: float = Field(default=1.0, gt=0)
    live: bool = True
    parallel: int | None = Field(default=None, ge=1, le=64)
    """Policies run at once, each in a child process; None: as cores and memory allow."""
    new_node_fault_probability: float = Field(default=0.0, ge=0.0, le=1.0)
    """Chance that a node Karpenter launches comes up faulty (dead on arrival)."""
    reboot_fault_probability: float = Field(default=0.0, ge=0.0, le=1.0)
    """Chance that a node comes back from a reboot faulty."""
    chaos: bool = False
    """Kill the system's own parts during each policy's run, then check its invariants."""
    chaos_kinds: str | None = None
    """With ``chaos``: 'all' (:data:`CHAOS_KINDS`) or a comma-separated list of them."""
    chaos_faults: int | None = Field(default=None, ge=1, le=100)
    """With ``chaos``: faults of each kind per policy (None: :data:`DEFAULT_CHAOS_FAULTS`)."""
    clock: Literal["paced", "server"] = "paced"
    """``paced``: the fleet's clock runs ``time_factor`` times real time beside a dev server.
    ``server``: clock-free (ADR 018): each policy on a time-skipping test server of its
    own, whose clock the fleet follows; ``time_factor`` plays no part."""
    step: float = Field(default=DEFAULT_STEP, gt=0, le=300)
    """With ``clock=server``: simulated seconds the fleet's clock moves at most at once."""
    step_phase: float = Field(default=0.0, ge=0.0, lt=1.0)
    """With ``clock=server``: where the step grid falls, a fraction of a step (the first
    step is ``step * (1 - step_phase)``). Only the factor check's noise runs move it."""

    @model_validator(mode="after")
    def _clock_free_limits(self) -> CompareOptions:
        if self.clock == "server" and self.chaos:
            raise ValueError(
                "--chaos runs on the paced clock only (--clock paced): it kills and restarts "
                "parts in real time, which the test server's clock does not see"
            )
        if self.clock != "server" and self.step_phase:
            raise ValueError("step_phase: only with the clock-free comparison (--clock server)")
        return self

    @field_validator("node_launch")
    @classmethod
    def _launch_in_range(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and not timedelta(0) < value <= MAX_NODE_LAUNCH:
            raise ValueError(f"must be more than 0 and at most {MAX_NODE_LAUNCH}")
        return value

    @field_validator("capacity_shortage", "lemon_share")
    @classmethod
    def _shortage_is_a_probability(cls, value: float | None) -> float | None:
        if value is not None and not 0.0 <= value <= 1.0:
            raise ValueError(f"a probability from 0 to 1, got {value:g}")
        return value

    @field_validator("chaos_kinds", "chaos_faults")
    @classmethod
    def _only_with_chaos(cls, value: object, info: ValidationInfo) -> object:
        if value is not None and not info.data.get("chaos"):
            raise ValueError("only with --chaos")
        return value

    @field_validator("chaos_kinds")
    @classmethod
    def _comparable_kinds(cls, value: str | None) -> str | None:
        if value is not None:
            chaos_kinds(value)  # a ValueError names the kind
        return value

    @property
    def chaos_plan(self) -> tuple[tuple[ChaosKind, ...], int]:
        """The chaos kinds and faults of each kind per policy (with ``chaos``)."""
        faults = self.chaos_faults if self.chaos_faults is not None else DEFAULT_CHAOS_FAULTS
        return chaos_kinds(self.chaos_kinds or "all"), faults


def chaos_kinds(text: str) -> tuple[ChaosKind, ...]:
    """``all`` (:data:`CHAOS_KINDS`) or a comma-separated list of them.

    Raises:
        ValueError: An unknown kind, or one a comparison cannot inject (and why).
    """
    if text.strip() == "all":
        return CHAOS_KINDS
    kinds = parse_kinds(text)
    shared = [k for k in kinds if k in SHARED_KINDS]
    if shared:
        raise ValueError(
            f"{', '.join(shared)} cannot be injected in a comparison: the policies share one "
            "Temporal server (a server restart would hit every policy running beside) and "
            f"run no alert receiver; the kinds here: {', '.join(CHAOS_KINDS)}"
        )
    return kinds


@dataclass(frozen=True)
class PolicyChoice:
    """One policy to run: its name in the table, where it came from, the policy itself."""

    name: str
    source: str
    policy: Policy


def options_from(**fields: object) -> CompareOptions:
    """Validate the command line.

    Raises:
        CompareError: Naming each bad option.
    """
    try:
        return CompareOptions.model_validate(fields)
    except ValidationError as err:
        problems = "; ".join(
            f"--{str(e['loc'][0]).replace('_', '-')}: {e['msg']}" if e["loc"] else e["msg"]
            for e in err.errors()
        )
        raise CompareError(problems) from err


def resolve_policies(text: str) -> list[PolicyChoice]:
    """Each item of ``--policies``: a baseline name or a policy file (merged over the defaults).

    Raises:
        CompareError: An empty list, a repeated name, an unknown name or an invalid file.
    """
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise CompareError("--policies: give at least one baseline name or policy file")
    chosen: list[PolicyChoice] = []
    for item in items:
        if item in BUILT_IN:
            chosen.append(PolicyChoice(item, f"policies/{item}.yaml", load_baseline(item)))
            continue
        path = Path(item)
        if not path.is_file():
            raise CompareError(
                f"--policies: {item!r} is neither a built-in policy ({', '.join(BUILT_IN)}) "
                "nor a policy file"
            )
        try:
            policy = load_policy(path)
        except PolicyError as err:
            raise CompareError(f"--policies: {err}") from err
        chosen.append(PolicyChoice(path.stem, str(path), policy))
    names = [c.name for c in chosen]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise CompareError(f"--policies: each policy once (repeated: {', '.join(repeated)})")
    return chosen


def compare_fleet(options: CompareOptions) -> tuple[FleetConfig, timedelta]:
    """The fleet every policy runs on (the demo's, plus the human operator) and the duration.

    Raises:
        CompareError: A bad pool list, scenario, fault mix or duration, naming the option.
    """
    _check_parts(options)
    demo = DemoOptions(
        nodes=options.nodes,
        pools=options.pools,
        scenario=options.scenario,
        fault_mix=options.fault_mix,
        fault_multiplier=options.fault_multiplier,
        time_factor=options.time_factor,
        duration=options.duration,
        seed=options.seed,
        workloads=options.workloads,
        job_nodes=options.job_nodes or DemoOptions.model_fields["job_nodes"].default,
    )
    try:
        config, duration = fleet_config(demo)
    except DemoError as err:  # the parts passed above: only their combination is left
        raise CompareError(str(err)) from err
    if options.duration is None and options.scenario is None:
        duration = DEFAULT_DURATION
    if duration <= timedelta(0):
        raise CompareError("--duration: must be positive")
    if config.fault_mix is None and config.scenario is None:
        raise CompareError("--fault-mix: 'none' without --scenario leaves nothing to compare")
    if options.operator:
        config = config.model_copy(update={"operator": OperatorConfig()})
    # Faulty arrivals are what the admission gate is for (issue 20): with none, a
    # gate on/off pair measures only the gate's slower node start. No public figure
    # gives these rates, so they are 0 unless the user states them (an assumption
    # the report prints).
    admission = (config.admission or AdmissionSimConfig()).model_copy(
        update={
            "new_node_fault_probability": options.new_node_fault_probability,
            "reboot_fault_probability": options.reboot_fault_probability,
        }
    )
    config = config.model_copy(update={"admission": admission})
    if options.job_nodes is None and config.workloads is not None:
        workloads = config.workloads.with_gangs(FLEET_GANGS, backoff_limit=FLEET_BACKOFF_LIMIT)
        config = config.model_copy(update={"workloads": workloads})
    if options.model is not None:
        try:
            config = load_model(options.model).apply(config)
        except ModelError as err:
            raise CompareError(f"--model: {err}") from err
    if options.node_launch is not None:
        listed = {entry.instance_type for entry in config.capacity.launch_by_instance_type}
        if any(pool.instance_type in listed for pool in config.pools):
            raise CompareError(
                "--node-launch: the model file gives these pools' instance types launch "
                "medians of their own (capacity.launch_by_instance_type); give one or the other"
            )
        durations = config.durations.model_copy(update={"node_launch": options.node_launch})
        config = config.model_copy(update={"durations": durations})
    if options.capacity_shortage is not None:
        capacity = config.capacity.model_copy(
            update={"insufficient_capacity_probability": options.capacity_shortage}
        )
        config = config.model_copy(update={"capacity": capacity})
    if options.lemon_share is not None:
        config = _with_lemons(config, options.lemon_share)
    if options.slow_fault_multiplier is not None:
        config = _with_slow_faults(config, options.slow_fault_multiplier)
    return config, duration


def _with_slow_faults(config: FleetConfig, multiplier: float) -> FleetConfig:
    """The fleet whose mix's extra (slow) kinds come ``multiplier`` times as often.

    The hard faults (``rates``) are drawn on a stream of their own, so they stay the same.

    Raises:
        CompareError: The mix has no extra kinds to scale.
    """
    mix = config.fault_mix
    if mix is None or not mix.extra_rates:
        raise CompareError(
            "--slow-fault-multiplier: the fault mix has no slow faults (extra_rates); "
            "give one that has, e.g. --fault-mix bench/mixes/llama3-slow.yaml"
        )
    rates = {kind: rate * multiplier for kind, rate in mix.extra_rates.items()}
    return config.model_copy(update={"fault_mix": mix.model_copy(update={"extra_rates": rates})})


def _with_lemons(config: FleetConfig, share: float) -> FleetConfig:
    """The fleet whose fault mix has ``share`` of its slots lemon hosts (0: none).

    Raises:
        CompareError: The run has no fault mix to add lemons to.
    """
    mix = config.fault_mix
    if mix is None:
        raise CompareError("--lemon-share: lemons fault more often than a fault mix says; no mix")
    lemons = None
    if share > 0:
        factor = mix.lemons.factor if mix.lemons is not None else MEAN_LEMON_FACTOR
        lemons = LemonModel(share=share, factor=factor)
    return config.model_copy(update={"fault_mix": mix.model_copy(update={"lemons": lemons})})


def _check_parts(options: CompareOptions) -> None:
    """Read the pools, the scenario and the mix one by one, so an error names its option."""
    try:
        parse_pools(options.pools, options.nodes)
    except ValueError as err:
        raise CompareError(f"--pools: {err}") from err
    if options.scenario is not None:
        try:
            Scenario.load(options.scenario)
        except ScenarioError as err:
            raise CompareError(f"--scenario: {err}") from err
    name = options.fault_mix
    if name is not None and name not in ("llama3", "none"):
        try:
            FaultMix.load(Path(name))
        except ScenarioError as err:
            raise CompareError(f"--fault-mix: {err} (give 'llama3', 'none' or a mix file)") from err
