"""Do a comparison's outcomes depend on the time factor? Two runs, one verdict.

The simulator runs time_factor times faster than real time and divides every
policy duration by the same factor, but Temporal and the APIs keep their real
latency, so a higher factor stretches that latency in simulated time. A check
runs the same comparison (same seed, mix, fleet and duration) at two factors
and judges: the fault timeline must be identical (same digest) and each
policy's outcomes must agree within noise. Noise bounds (assumptions, stated in
the report): availability within ``AVAILABILITY_PP`` percentage points; each
count within ``COUNT_SLACK`` or ``COUNT_FRACTION`` of the larger value,
whichever is more; MTTR is reported, not judged (it carries the latency).
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

AVAILABILITY_PP = 0.2
COUNT_SLACK = 2
COUNT_FRACTION = 0.2
COUNTS = ("nodes_replaced", "reboots", "resets", "escalations")


@dataclass(frozen=True)
class PolicyDelta:
    """One policy's outcomes at both factors and whether they agree."""

    policy: str
    values: dict[str, tuple[float, float]]
    disagreements: list[str]

    @property
    def agrees(self) -> bool:
        """True when every judged outcome is within its noise bound."""
        return not self.disagreements

    def mttr_split(self, factors: tuple[float, float]) -> dict[str, float] | None:
        """MTTR p50 split by the linear model ``MTTR = simulated work + factor x real latency``.

        Two factors give the real latency per incident (``latency_real_s``, the real
        seconds of Temporal and API round trips and polls) and the simulated work
        (``work_sim_s``, what the fleet's own durations take); ``at_1x_s`` is what the
        MTTR would be if that latency counted once, as in a real deployment. None
        when the factors are equal or either run had no MTTR.
        """
        low, high = self.values.get("mttr_p50_s", (0.0, 0.0))
        f_low, f_high = factors
        if f_low == f_high or not low or not high:
            return None
        latency = (high - low) / (f_high - f_low)
        work = low - f_low * latency
        return {
            "latency_real_s": round(latency, 3),
            "work_sim_s": round(work, 1),
            "at_1x_s": round(work + latency, 1),
        }


@dataclass(frozen=True)
class FactorCheck:
    """The verdict over two comparisons of the same seed at two time factors."""

    factors: tuple[float, float]
    digests: tuple[str, str]
    policies: list[PolicyDelta] = field(default_factory=list)

    @property
    def same_faults(self) -> bool:
        """True when both runs planned the same fault timeline."""
        return self.digests[0] == self.digests[1]

    @property
    def passed(self) -> bool:
        """Same faults and every policy within noise."""
        return self.same_faults and all(p.agrees for p in self.policies)

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready summary (for the bench's output)."""
        return {
            "factors": list(self.factors),
            "digests": list(self.digests),
            "same_faults": self.same_faults,
            "passed": self.passed,
            "policies": {
                p.policy: {
                    "values": {k: list(v) for k, v in p.values.items()},
                    "disagreements": p.disagreements,
                    "mttr_p50_split": p.mttr_split(self.factors),
                }
                for p in self.policies
            },
        }


def _count_within(a: float, b: float) -> bool:
    return abs(a - b) <= max(COUNT_SLACK, COUNT_FRACTION * max(a, b))


def judge(
    factors: tuple[float, float],
    first: dict[str, dict[str, Any]],
    second: dict[str, dict[str, Any]],
) -> FactorCheck:
    """Compare two ``comparison_json(...)["policies"]`` objects run at ``factors``.

    Raises:
        ValueError: The runs compared different policies.
    """
    if list(first) != list(second):
        raise ValueError(f"policies differ: {list(first)} vs {list(second)}")
    digest_a = next(iter(first.values()))["timeline"]["digest"] if first else ""
    digest_b = next(iter(second.values()))["timeline"]["digest"] if second else ""
    deltas: list[PolicyDelta] = []
    for name, a in first.items():
        b = second[name]
        values: dict[str, tuple[float, float]] = {
            "availability": (a["availability"], b["availability"]),
            "mttr_p50_s": (a.get("mttr_p50_s") or 0.0, b.get("mttr_p50_s") or 0.0),
        }
        wrong: list[str] = []
        if abs(a["availability"] - b["availability"]) * 100 > AVAILABILITY_PP:
            wrong.append("availability")
        for key in COUNTS:
            values[key] = (float(a[key]), float(b[key]))
            if not _count_within(float(a[key]), float(b[key])):
                wrong.append(key)
        deltas.append(PolicyDelta(name, values, wrong))
    return FactorCheck(factors, (digest_a, digest_b), deltas)


def _cell(key: str, value: float) -> str:
    if key == "availability":
        return f"{value * 100:.3f}%"
    if key.endswith("_s"):
        return f"{value / 60:.0f} min"
    return f"{value:g}"


def html_section(check: FactorCheck | None) -> str:
    """The report's section on the time factor: the check's verdict, or how to run it."""
    if check is None:
        return (
            "<h2>Does the time factor matter?</h2><p>Not checked in this run. Run "
            "<code>python -m bench.compare --time-factor A --factor-check B --report "
            "FILE.html</code>: the same comparison at two factors, judged for the same "
            "fault digest and outcomes within noise.</p>"
        )
    a, b = (f"{f:g}" for f in check.factors)
    rows = []
    for p in check.policies:
        cells = "".join(
            f"<td>{_cell(k, v[0])} / {_cell(k, v[1])}</td>" for k, v in p.values.items()
        )
        verdict = "agree" if p.agrees else "differ: " + ", ".join(p.disagreements)
        rows.append(f"<tr><td>{html.escape(p.policy)}</td>{cells}<td>{verdict}</td></tr>")
    keys = list(check.policies[0].values) if check.policies else []
    head = "".join(f"<th>{k} ({a} / {b})</th>" for k in keys)
    verdict = "PASSED" if check.passed else "FAILED"
    return (
        f"<h2>Does the time factor matter? {verdict}</h2>"
        f"<p>The same comparison (same seed, mix, fleet, duration) at time factors {a} and "
        f"{b}: fault timeline digests <code>{check.digests[0]}</code> and "
        f"<code>{check.digests[1]}</code> ({'the same' if check.same_faults else 'DIFFERENT'}"
        f"). Noise bounds (assumptions): availability within {AVAILABILITY_PP} percentage "
        f"points, each count within {COUNT_SLACK} or {COUNT_FRACTION:.0%} of the larger; MTTR "
        "is shown, not judged (real Temporal and API latency is stretched by the factor).</p>"
        f"<table><thead><tr><th>policy</th>{head}<th>verdict</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
        f"<p>MTTR p50 = simulated work + factor x real latency, solved from the two factors: "
        f"{html.escape(_splits(check))}.</p>"
    )


def _splits(check: FactorCheck) -> str:
    parts = []
    for p in check.policies:
        split = p.mttr_split(check.factors)
        if split is None:
            parts.append(f"{p.policy}: no MTTR at one factor")
            continue
        parts.append(
            f"{p.policy}: {split['latency_real_s']:.2f} real s of latency, "
            f"{split['work_sim_s'] / 60:.0f} simulated min of work, "
            f"{split['at_1x_s'] / 60:.0f} min with latency counted once"
        )
    return "; ".join(parts)
