"""What one step-time report costs the straggler detector, by the size of the gang.

Every rank of a gang-scheduled job writes its step time (docs/checkpoint-contract.md);
the checkpoint relay feeds each write to ``triggers.stragglers.StragglerDetector``,
which compares it with the median of the gang's fresh times. If a report cost grew
with the gang, a round of reports (one per rank) would grow with its square. This
feeds rounds of reports of gangs of several sizes, one slow rank each, and reports
real microseconds per report.

    python -m bench.stragglers [--sizes 256,1024,4096] [--rounds 5] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from checkpoint_client.protocol import STEP_TIME_ANNOTATION
from gpu_remediation.policy import StragglerPolicy
from triggers.stragglers import StragglerDetector

JOB_LABEL = "jobset.sigs.k8s.io/jobset-name"
T0 = datetime(2026, 12, 7, tzinfo=UTC)
POLICY = StragglerPolicy(
    margin=0.2, min_steps=200, min_gang=3, stale_after=timedelta(minutes=15), min_span=timedelta(0)
)


def _pod(rank: int, step: int, seconds: float) -> dict[str, Any]:
    value = json.dumps({"version": 1, "step": step, "seconds": seconds, "steps": 100})
    return {
        "metadata": {
            "uid": f"uid-{rank}",
            "name": f"llm-{rank}",
            "namespace": "ml",
            "labels": {JOB_LABEL: "llm"},
            "annotations": {STEP_TIME_ANNOTATION: value},
        },
        "spec": {
            "nodeName": f"gpu-{rank}",
            "containers": [{"resources": {"limits": {"nvidia.com/gpu": "8"}}}],
        },
        "status": {"phase": "Running"},
    }


def measure(size: int, rounds: int) -> dict[str, Any]:
    """Microseconds per report over ``rounds`` rounds of a gang of ``size`` (the last one slow)."""
    detector = StragglerDetector(POLICY, [JOB_LABEL])
    batches = [
        [_pod(rank, 100 * (r + 1), 2.6 if rank == size - 1 else 2.0) for rank in range(size)]
        for r in range(rounds)
    ]
    reports = 0
    began = time.perf_counter()
    for r, batch in enumerate(batches):
        now = T0 + timedelta(seconds=30 * r)
        for pod in batch:
            reports += len(detector.observe("MODIFIED", pod, now))
    took = time.perf_counter() - began
    return {
        "gang": size,
        "reports_in": size * rounds,
        "stragglers_reported": reports,
        "us_per_report": round(took / (size * rounds) * 1e6, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="256,1024,4096")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        parser.error(f"--sizes: gang sizes separated by commas, not {args.sizes!r}")
    if any(s < POLICY.min_gang for s in sizes) or args.rounds < 1:
        parser.error(f"--sizes: at least {POLICY.min_gang} each; --rounds: at least 1")
    results = [measure(size, args.rounds) for size in sizes]
    for row in results:
        print(f"gang of {row['gang']:6d}: {row['us_per_report']:8.1f} us per report")
    text = json.dumps({"rounds": args.rounds, "results": results}, indent=2)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
