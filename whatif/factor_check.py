"""Do a comparison's outcomes depend on the time factor? The strict judge (issue 40).

The simulator runs ``time_factor`` times faster than real time and every policy
duration is scaled to it, but Temporal and the APIs keep their real latency, so
a higher factor stretches that latency in simulated time (``MTTR = work +
factor x latency``). The check runs the same comparison (same seed, fleet, fault
mix, duration and policies) at two factors 4x apart and judges each policy's
outcomes. This module is the judge, pure: it reads the two runs' result
documents (``bench.compare``'s JSON) and returns a verdict or refuses.

Refused (:class:`FactorCheckError`, naming what is wrong), before any judging:

- a document that is not a ``bench.compare`` run result (a missing or mistyped
  field is named);
- one factor only (both runs at the same factor), or factors not 4x apart;
- different seeds, fleets (nodes, pools, fault mix, multiplier, duration, faulty
  arrival rates), fault timelines (digest) or policies;
- fewer than :data:`MIN_INCIDENTS` incidents for any policy in any run (the
  counts are named): 5% of fewer events cannot be told from one event.

Judged, per policy (``first`` and ``second`` in the order given):

- **availability**: ``|a - b| <= 0.01`` percentage points;
- **every count** (incidents, each outcome, each rung's attempts, nodes
  replaced, replacements, reboots, resets, escalations, breaker trips, job runs
  succeeded, failed, failed by the remediation, job failures the remediation
  caused): ``|a - b| <= 5%`` of the larger. No slack of one event is added: a
  count under 20 (where 5% is under one event) passes only when equal, and the
  table says so;
- **MTTR p50 on the simulator's clock** (``mttr_clock_p50_s``): ``|a - b| <=
  10%`` of the larger; missing in one run only is a failure.

With noise runs (more runs at one of the two factors, same seed and fleet), the
noise of a metric is the largest ``|x - x'|`` between a noise run and the run at
its factor, and the metric's allowed difference is ``max(tolerance, noise)``:
widened only to the noise measured, never further; each row says which applied.
Clock-free, a repeat on the same step grid replays the same run (the world and
the test server's clock are deterministic), so a noise run moves the grid by a
fraction of a step (``step_phase``): it differs from the first only in where
events fall between steps, which is what a different step changes too. Counts
of what happened to jobs are chaotic in that sense: one incident a few seconds
earlier frees a node sooner, the next job lands elsewhere, and a later fault
finds a different job (or none) on its node.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

AVAILABILITY_POINTS = 0.01
"""Allowed availability difference, in percentage points."""
COUNT_FRACTION = 0.05
"""Allowed difference of a count, as a fraction of the larger value."""
MTTR_FRACTION = 0.10
"""Allowed difference of MTTR p50 (simulator's clock), as a fraction of the larger."""
MIN_INCIDENTS = 100
"""Incidents each policy needs in every run for the check to judge."""
FACTOR_RATIO = 4.0
"""The two factors' ratio."""
SMALL_COUNT = math.ceil(1 / COUNT_FRACTION)
"""Counts below this: 5% of them is under one event."""

LEGACY_FLEET_KEYS = (
    "nodes",
    "days",
    "multiplier",
    "new_node_fault_probability",
    "reboot_fault_probability",
)
"""The fleet of a result written before ``fleet`` was recorded (its pools and mix were
fixed: ``h100,p5:no-reset``, ``llama3``)."""
LEGACY_SEED = 0
"""The seed of a result written before ``seed`` was recorded: bench.compare never set one."""

AVAILABILITY = "availability"
MTTR = "mttr_clock_p50_s"
_COUNT_KEYS = (
    "incidents",
    "nodes_replaced",
    "replacements",
    "reboots",
    "resets",
    "escalations",
    "breaker_trips",
)
_JOB_KEYS = (
    "runs_succeeded",
    "runs_failed",
    "runs_failed_by_remediation",
    "remediation_caused_failures",
)
_REQUIRED_POLICY_KEYS = (
    AVAILABILITY,
    MTTR,
    "outcomes",
    "rung_attempts",
    "timeline",
    *_COUNT_KEYS,
)


class FactorCheckError(ValueError):
    """The check refuses to judge: the message says why."""


@dataclass(frozen=True)
class RunResult:
    """One run's result document as the judge reads it.

    Attributes:
        label: What to call it in messages (its file, or "the run at factor F").
        time_factor: The setting the check varies: the requested time factor of a
            paced run, the step (simulated seconds) of a clock-free one.
        seed: The comparison's seed.
        fleet: What must be equal between runs (nodes, pools, mix, duration...).
        digest: The fault timeline's digest.
        policies: Policy name -> its row of the comparison's JSON.
    """

    label: str
    time_factor: float
    seed: int
    fleet: dict[str, Any]
    digest: str
    policies: dict[str, dict[str, Any]]
    clock: str = "paced"
    """``paced`` (real time x factor) or ``server`` (clock-free: the test server's)."""
    phase: float = 0.0
    """Clock-free: where the step grid fell, a fraction of a step (``step_phase``)."""


def _need(doc: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in doc:
        raise FactorCheckError(f"{where}: no {key!r}")
    value = doc[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        wanted = " or ".join(k.__name__ for k in kinds)
        raise FactorCheckError(f"{where}: {key!r} is a {type(value).__name__}, not {wanted}")
    return value


def read_run(doc: object, label: str) -> RunResult:
    """Read a ``bench.compare`` run result (its JSON, loaded).

    Raises:
        FactorCheckError: Not such a document: the missing or mistyped field is named.
    """
    where = f"{label} is not a bench.compare run result"
    if not isinstance(doc, Mapping):
        raise FactorCheckError(f"{where}: a {type(doc).__name__}, not an object")
    clock = str(doc.get("clock", "paced"))
    if clock not in ("paced", "server"):
        raise FactorCheckError(f"{where}: clock {clock!r} is neither 'paced' nor 'server'")
    # Clock-free, what may not matter is the step; paced, the time factor.
    setting = "step" if clock == "server" else "time_factor"
    factor = float(_need(doc, setting, (int, float), where))
    if not factor > 0:
        raise FactorCheckError(f"{where}: {setting} {factor:g} is not positive")
    digest = str(_need(doc, "digest", str, where))
    comparison = _need(doc, "comparison", Mapping, where)
    policies = _need(comparison, "policies", Mapping, f"{where} ('comparison')")
    if not policies:
        raise FactorCheckError(f"{where}: no policies")
    for name, row in policies.items():
        at = f"{where} (policy {name!r})"
        if not isinstance(row, Mapping):
            raise FactorCheckError(f"{at}: not an object")
        for key in _REQUIRED_POLICY_KEYS:
            if key not in row:
                raise FactorCheckError(f"{at}: no {key!r}")
        if str((row.get("timeline") or {}).get("digest")) != digest:
            raise FactorCheckError(f"{at}: its timeline digest is not the run's {digest}")
    if "fleet" in doc:
        fleet = dict(_need(doc, "fleet", Mapping, where))
    else:
        fleet = {key: _need(doc, key, (int, float), where) for key in LEGACY_FLEET_KEYS}
    seed = int(_need(doc, "seed", int, where)) if "seed" in doc else LEGACY_SEED
    phase = float(_need(doc, "step_phase", (int, float), where)) if "step_phase" in doc else 0.0
    if not 0.0 <= phase < 1.0:
        raise FactorCheckError(f"{where}: step_phase {phase:g} is not in [0, 1)")
    return RunResult(
        label=label,
        time_factor=factor,
        seed=seed,
        fleet=fleet,
        digest=digest,
        policies={str(k): dict(v) for k, v in policies.items()},
        clock=clock,
        phase=phase,
    )


def metrics(row: Mapping[str, Any]) -> dict[str, float | None]:
    """The judged figures of one policy's row: availability, the counts, MTTR p50."""
    values: dict[str, float | None] = {AVAILABILITY: float(row[AVAILABILITY])}
    for key in _COUNT_KEYS:
        values[key] = float(row[key])
    for outcome, n in sorted((row.get("outcomes") or {}).items()):
        values[f"outcomes.{outcome}"] = float(n)
    for rung, n in sorted((row.get("rung_attempts") or {}).items()):
        values[f"rung_attempts.{rung}"] = float(n)
    jobs = row.get("jobs")
    if isinstance(jobs, Mapping):
        for key in _JOB_KEYS:
            if key in jobs:
                values[f"jobs.{key}"] = float(jobs[key])
    mttr = row[MTTR]
    values[MTTR] = None if mttr is None else float(mttr)
    return values


@dataclass(frozen=True)
class Judged:
    """One metric of one policy, judged.

    Attributes:
        policy: The policy.
        metric: The metric (``outcomes.X`` and ``rung_attempts.X`` per kind).
        first: Its value in the first run (None: absent).
        second: Its value in the second run.
        difference: ``|first - second|`` (availability in percentage points).
        tolerance: The strict allowed difference, in the same unit.
        noise: The largest ``|x - x'|`` of a noise run and the run at its factor
            (None: no noise run).
        allowed: ``max(tolerance, noise)``: what the difference was judged against.
        passed: ``difference <= allowed``.
        note: Why the row reads as it does, when it needs saying.
    """

    policy: str
    metric: str
    first: float | None
    second: float | None
    difference: float | None
    tolerance: float
    noise: float | None
    allowed: float
    passed: bool
    note: str = ""


def _value(values: Mapping[str, float | None], metric: str) -> float | None:
    # A count absent from one run's dict (an outcome that did not occur) is zero there.
    if metric in values:
        return values[metric]
    return None if metric in (AVAILABILITY, MTTR) else 0.0


def _distance(metric: str, a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    scale = 100.0 if metric == AVAILABILITY else 1.0
    return abs(a - b) * scale


def _tolerance(metric: str, a: float, b: float) -> float:
    if metric == AVAILABILITY:
        return AVAILABILITY_POINTS
    fraction = MTTR_FRACTION if metric == MTTR else COUNT_FRACTION
    return fraction * max(abs(a), abs(b))


def _judge_metric(
    policy: str,
    metric: str,
    a: float | None,
    b: float | None,
    noise_pairs: list[tuple[float | None, float | None]],
) -> Judged:
    if a is None and b is None:
        return Judged(policy, metric, a, b, None, 0.0, None, 0.0, True, "no MTTR in either run")
    if a is None or b is None:
        return Judged(policy, metric, a, b, None, 0.0, None, 0.0, False, "measured in one run only")
    difference = abs(a - b) * (100.0 if metric == AVAILABILITY else 1.0)
    tolerance = _tolerance(metric, a, b)
    distances = [d for d in (_distance(metric, *pair) for pair in noise_pairs) if d is not None]
    noise = max(distances) if distances else None
    allowed = max(tolerance, noise or 0.0)
    notes = []
    if metric not in (AVAILABILITY, MTTR) and max(a, b) < SMALL_COUNT:
        notes.append(
            "none in either run"
            if max(a, b) == 0
            else f"under {SMALL_COUNT}: 5% is under one event, any difference fails"
        )
    if noise is not None and noise > tolerance:
        notes.append("tolerance widened to the measured noise")
    passed = difference <= allowed + 1e-9
    return Judged(
        policy, metric, a, b, difference, tolerance, noise, allowed, passed, "; ".join(notes)
    )


@dataclass(frozen=True)
class FactorCheck:
    """The verdict over two runs of the same comparison at two factors (and noise runs).

    Attributes:
        factors: The first and second run's factors.
        seed: Their seed.
        fleet: Their fleet.
        digest: Their fault timeline's digest.
        incidents: Policy -> incidents in each run (first, second, noise runs...).
        rows: Every judged metric.
        noise_factor: The noise runs' factor (None: no noise run).
        noise_phases: Each noise run's step phase (clock-free; 0 when paced).
        unsettled: Runs and policies whose incidents had not all settled (a caution).
        latency_share: Policy -> each run's latency share of MTTR p50 (``whatif.latency``).
        clock: ``paced`` (the factors are time factors) or ``server`` (clock-free: the
            factors are steps, in simulated seconds).
    """

    factors: tuple[float, float]
    seed: int
    fleet: dict[str, Any]
    digest: str
    incidents: dict[str, list[int]]
    clock: str = "paced"
    rows: list[Judged] = field(default_factory=list)
    noise_factor: float | None = None
    noise_phases: list[float] = field(default_factory=list)
    unsettled: list[str] = field(default_factory=list)
    latency_share: dict[str, list[float | None]] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """Every metric of every policy within its allowed difference."""
        return all(r.passed for r in self.rows)

    @property
    def failures(self) -> list[Judged]:
        """The rows outside their allowed difference."""
        return [r for r in self.rows if not r.passed]

    @property
    def setting(self) -> str:
        """What the two runs differ in: ``factor`` (paced) or ``step`` (clock-free)."""
        return "step" if self.clock == "server" else "factor"

    def mttr_split(self, policy: str) -> dict[str, float] | None:
        """MTTR p50 split by ``MTTR = simulated work + factor x real latency``.

        Two factors give the real latency per incident (``latency_real_s``) and the
        simulated work (``work_sim_s``); ``at_1x_s`` is the MTTR with latency counted
        once, as in a real deployment. None without MTTR in both runs.
        """
        row = next((r for r in self.rows if r.policy == policy and r.metric == MTTR), None)
        if self.clock == "server" or row is None or row.first is None or row.second is None:
            return None  # clock-free, no factor stretches the latency
        (f1, f2), (m1, m2) = self.factors, (row.first, row.second)
        latency = (m2 - m1) / (f2 - f1)
        work = m1 - f1 * latency
        return {
            "latency_real_s": round(latency, 4),
            "work_sim_s": round(work, 1),
            "at_1x_s": round(work + latency, 1),
        }

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready verdict (the bench's output)."""
        return {
            "passed": self.passed,
            "clock": self.clock,
            "factors": list(self.factors),
            "noise_factor": self.noise_factor,
            "noise_runs": len(self.noise_phases),
            "noise_phases": self.noise_phases,
            "seed": self.seed,
            "fleet": self.fleet,
            "digest": self.digest,
            "rules": rules(),
            "incidents": self.incidents,
            "unsettled": self.unsettled,
            "failures": [f"{r.policy} {r.metric}" for r in self.failures],
            "rows": [r.__dict__ for r in self.rows],
            "mttr_p50_split": {p: self.mttr_split(p) for p in self.incidents},
            "latency_share_of_mttr_p50": self.latency_share,
        }


def rules() -> dict[str, Any]:
    """The judge's rules, as the JSON records them."""
    return {
        "factor_ratio": FACTOR_RATIO,
        "min_incidents_per_policy": MIN_INCIDENTS,
        "availability_points": AVAILABILITY_POINTS,
        "count_fraction_of_larger": COUNT_FRACTION,
        "mttr_clock_p50_fraction_of_larger": MTTR_FRACTION,
        "noise": "allowed = max(tolerance, the largest |x - x'| of a noise run and the run "
        "at its factor)",
    }


def check_factors(first: float, second: float) -> None:
    """Refuse factors that are equal or not 4x apart.

    Raises:
        FactorCheckError: Naming both factors.
    """
    if first == second:
        raise FactorCheckError(
            f"one factor only: both runs at {first:g}; the check needs two factors "
            f"{FACTOR_RATIO:g}x apart (e.g. F and F/{FACTOR_RATIO:g})"
        )
    ratio = max(first, second) / min(first, second)
    if not math.isclose(ratio, FACTOR_RATIO, rel_tol=1e-6):
        raise FactorCheckError(
            f"factors {first:g} and {second:g} are {ratio:g}x apart; the check needs "
            f"{FACTOR_RATIO:g}x (e.g. {first:g} and {first / FACTOR_RATIO:g})"
        )


def check_incidents(run: RunResult) -> None:
    """Refuse a run in which a policy had fewer than :data:`MIN_INCIDENTS` incidents.

    Raises:
        FactorCheckError: Naming each such policy and its count.
    """
    few = {
        name: int(row["incidents"])
        for name, row in run.policies.items()
        if int(row["incidents"]) < MIN_INCIDENTS
    }
    if few:
        counts = ", ".join(f"{name} {n}" for name, n in few.items())
        raise FactorCheckError(
            f"too few incidents to judge in {run.label}: {counts} (at least {MIN_INCIDENTS} "
            "per policy in every run; raise --nodes, --days or --multiplier)"
        )


def _same(a: RunResult, b: RunResult) -> None:
    if a.clock != b.clock:
        raise FactorCheckError(f"clocks differ: {a.label} {a.clock}, {b.label} {b.clock}")
    if a.seed != b.seed:
        raise FactorCheckError(f"seeds differ: {a.label} {a.seed}, {b.label} {b.seed}")
    keys = sorted(set(a.fleet) | set(b.fleet))
    differ = [
        f"{k} {a.fleet.get(k)!r} vs {b.fleet.get(k)!r}"
        for k in keys
        if a.fleet.get(k) != b.fleet.get(k)
    ]
    if differ:
        raise FactorCheckError(f"fleets differ ({a.label} vs {b.label}): {'; '.join(differ)}")
    if a.digest != b.digest:
        raise FactorCheckError(
            f"fault timelines differ with the same seed and fleet: {a.label} {a.digest}, "
            f"{b.label} {b.digest} (made by different code?)"
        )
    if list(a.policies) != list(b.policies):
        raise FactorCheckError(
            f"policies differ: {a.label} {list(a.policies)}, {b.label} {list(b.policies)}"
        )
    sources = [
        name
        for name in a.policies
        if a.policies[name].get("policy_source") != b.policies[name].get("policy_source")
    ]
    if sources:
        raise FactorCheckError(f"policies from different sources: {', '.join(sources)}")


def judge(first: object, second: object, *noise: object) -> FactorCheck:
    """Judge two runs of one comparison at two factors 4x apart (see the module's rules).

    Args:
        first: The first run's result document (``bench.compare``'s JSON, loaded) or
            a :class:`RunResult`.
        second: The second run's, at a factor 4x apart.
        noise: Noise runs, all at the first or all at the second factor: the measured
            noise.

    Raises:
        FactorCheckError: Refused (bad input, too few incidents): the message says why.
    """
    a = first if isinstance(first, RunResult) else read_run(first, "the first run")
    b = second if isinstance(second, RunResult) else read_run(second, "the second run")
    check_factors(a.time_factor, b.time_factor)
    _same(a, b)
    ns: list[RunResult] = []
    for i, doc in enumerate(noise, 1):
        label = "the noise run" if len(noise) == 1 else f"noise run {i}"
        n = doc if isinstance(doc, RunResult) else read_run(doc, label)
        if n.time_factor not in (a.time_factor, b.time_factor):
            raise FactorCheckError(
                f"{label} is at factor {n.time_factor:g}; it must repeat one of the "
                f"two ({a.time_factor:g} or {b.time_factor:g})"
            )
        if ns and n.time_factor != ns[0].time_factor:
            raise FactorCheckError(
                f"noise runs at two factors ({ns[0].time_factor:g} and {n.time_factor:g}): "
                "they must all repeat the same one"
            )
        _same(a, n)
        ns.append(n)
    for run in (a, b, *ns):
        check_incidents(run)
    twin = (a if ns[0].time_factor == a.time_factor else b) if ns else None
    rows: list[Judged] = []
    for name in a.policies:
        va, vb = metrics(a.policies[name]), metrics(b.policies[name])
        vt = metrics(twin.policies[name]) if twin is not None else None
        vns = [metrics(n.policies[name]) for n in ns]
        keys = list(dict.fromkeys([*va, *vb, *(k for vn in vns for k in vn)]))
        for key in keys:
            pairs = [] if vt is None else [(_value(vt, key), _value(vn, key)) for vn in vns]
            rows.append(_judge_metric(name, key, _value(va, key), _value(vb, key), pairs))
    runs = [a, b, *ns]
    return FactorCheck(
        factors=(a.time_factor, b.time_factor),
        clock=a.clock,
        seed=a.seed,
        fleet=a.fleet,
        digest=a.digest,
        incidents={p: [int(r.policies[p]["incidents"]) for r in runs] for p in a.policies},
        rows=rows,
        noise_factor=ns[0].time_factor if ns else None,
        noise_phases=[n.phase for n in ns],
        unsettled=[
            f"{r.label} {p}"
            for r in runs
            for p, row in r.policies.items()
            if not row.get("settled", True)
        ],
        latency_share={
            p: [(r.policies[p].get("latency") or {}).get("share_of_mttr_p50") for r in runs]
            for p in a.policies
        },
    )


def _cell(metric: str, value: float | None) -> str:
    if value is None:
        return "-"
    if metric == AVAILABILITY:
        return f"{value * 100:.4f}%"
    if metric == MTTR:
        return f"{value:.0f} s"
    return f"{value:g}"


def _amount(metric: str, value: float | None) -> str:
    if value is None:
        return "-"
    if metric == AVAILABILITY:
        return f"{value:.4f} pp"
    if metric == MTTR:
        return f"{value:.0f} s"
    return f"{value:.2f}"


def table_rows(check: FactorCheck) -> list[tuple[str, ...]]:
    """The verdict's table: one row per policy and metric (header first)."""
    f1, f2 = (f"{f:g}" for f in check.factors)
    noise = check.noise_factor is not None
    head = (
        "policy",
        "metric",
        f"at {f1}",
        f"at {f2}",
        "difference",
        "tolerance",
        *(("noise", "allowed") if noise else ()),
        "verdict",
        "note",
    )
    rows: list[tuple[str, ...]] = [head]
    for r in check.rows:
        rows.append(
            (
                r.policy,
                r.metric,
                _cell(r.metric, r.first),
                _cell(r.metric, r.second),
                _amount(r.metric, r.difference),
                _amount(r.metric, r.tolerance),
                *((_amount(r.metric, r.noise), _amount(r.metric, r.allowed)) if noise else ()),
                "ok" if r.passed else "FAIL",
                r.note,
            )
        )
    return rows


def verdict_line(check: FactorCheck) -> str:
    """One line: passed or failed, the factors and what failed."""
    f1, f2 = (f"{f:g}" for f in check.factors)
    noise = f", noise measured at {_noise_runs(check)}" if check.noise_factor else ""
    word = check.setting
    if check.passed:
        return f"{word} check PASSED: {word}s {f1} and {f2}{noise}, {len(check.rows)} metrics"
    failed = ", ".join(f"{r.policy} {r.metric}" for r in check.failures)
    return (
        f"{word} check FAILED: {word}s {f1} and {f2}{noise}: {len(check.failures)} of "
        f"{len(check.rows)} metrics outside their tolerance ({failed})"
    )


def _noise_runs(check: FactorCheck) -> str:
    # "15 (2 runs, step grid moved by 1/3 and 2/3 of a step)"
    runs = len(check.noise_phases)
    what = f"{check.noise_factor:g}" + (f" ({runs} runs" if runs > 1 else "")
    moved = [p for p in check.noise_phases if p]
    if moved:
        shifts = " and ".join(f"{p:.2g}" for p in moved)
        what += (", " if runs > 1 else " (") + f"step grid moved by {shifts} of a step)"
    elif runs > 1:
        what += ")"
    return what


def text_table(check: FactorCheck) -> str:
    """The verdict as plain text: the table, then the verdict line."""
    rows = table_rows(check)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    extra = (
        [f"caution: not every incident settled: {', '.join(check.unsettled)}"]
        if check.unsettled
        else []
    )
    return "\n".join([*lines, *extra, verdict_line(check)])


def html_section(check: FactorCheck | None, refusal: str | None = None) -> str:
    """The report's section on the time factor: the verdict, the refusal, or how to run it."""
    if check is None and refusal is not None:
        return (
            "<h2>Does the time factor matter? Not judged</h2><p><strong>factor check refused: "
            f"{html.escape(refusal)}</strong></p>"
        )
    if check is None:
        return (
            "<h2>Does the time factor matter?</h2><p>Not checked in this run. Run "
            "<code>python -m bench.compare --time-factor F --factor-check --report "
            "FILE.html</code>: the same comparison at F and F/4, judged strictly "
            "(<code>whatif/factor_check.py</code>).</p>"
        )
    rows = table_rows(check)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in rows[0])
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows[1:]
    )
    splits = "; ".join(
        f"{p}: {s['latency_real_s']:.3f} real s of latency, {s['work_sim_s']:.0f} simulated s "
        f"of work, {s['at_1x_s']:.0f} s with latency counted once"
        if (s := check.mttr_split(p)) is not None
        else f"{p}: no MTTR in both runs"
        for p in check.incidents
    )
    verdict = "PASSED" if check.passed else "FAILED"
    what = "the clock's step" if check.clock == "server" else "the time factor"
    settings = "steps (simulated seconds)" if check.clock == "server" else "time factors"
    return (
        f"<h2>Does {what} matter? {verdict}</h2>"
        f"<p>The same comparison (seed {check.seed}, fault timeline <code>"
        f"{html.escape(check.digest)}</code>) at {settings} {check.factors[0]:g} and "
        f"{check.factors[1]:g}, at least {MIN_INCIDENTS} incidents per policy in every run. "
        f"Rules: availability within {AVAILABILITY_POINTS} percentage points; every count "
        f"within {COUNT_FRACTION:.0%} of the larger (no slack: under {SMALL_COUNT}, any "
        f"difference fails); MTTR p50 on the simulator's clock within {MTTR_FRACTION:.0%} of "
        "the larger"
        + (
            f"; noise runs at {html.escape(_noise_runs(check))} widen a tolerance to the "
            "largest difference measured between a noise run and the run at that "
            f"{check.setting}, no further"
            if check.noise_factor is not None
            else ""
        )
        + f".</p><p><strong>{html.escape(verdict_line(check))}</strong></p>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        + (
            ""
            if check.clock == "server"
            else "<p>MTTR p50 = simulated work + factor x real latency, solved from the two "
            f"factors: {html.escape(splits)}.</p>"
        )
    )
