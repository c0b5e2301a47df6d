"""How the time-skipping test server's step call costs more the more it has answered.

The clock-free comparison (ADR 018) moves each policy's test server 15 simulated
seconds at a time with ``UnlockTimeSkippingWithSleep``: about 173,000 calls for a
30-day run. This measures that call alone, on a fresh server with no workflow, in
blocks: if its cost grows with the calls already made, a run's cost grows with the
square of its length (docs/scaling.md).

    python -m bench.server_steps [--steps 30000] [--block 3000] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from activities.world_time import TestServerTime
from whatif.server_time import DEFAULT_STEP, time_skipping_server


async def measure(steps: int, block: int, step: float = DEFAULT_STEP) -> dict[str, Any]:
    """Real milliseconds per call, per block of ``block`` calls, over ``steps`` calls."""
    blocks: list[dict[str, float]] = []
    async with time_skipping_server() as (client, _):
        server = TestServerTime(client)
        began = time.perf_counter()
        for done in range(block, steps + 1, block):
            start = time.perf_counter()
            for _ in range(block):
                await server.sleep(step)  # the driver's step call (UnlockTimeSkippingWithSleep)
            per_call = (time.perf_counter() - start) / block * 1000
            blocks.append({"calls_made": done, "ms_per_call": round(per_call, 3)})
            print(f"after {done:7d} calls: {per_call:.3f} ms per call", flush=True)
        wall = time.perf_counter() - began
    first, last = blocks[0], blocks[-1]
    growth = (last["ms_per_call"] - first["ms_per_call"]) / (
        (last["calls_made"] - first["calls_made"]) / 1000
    )
    return {
        "steps": steps,
        "block": block,
        "step_s": step,
        "wall_s": round(wall, 1),
        "blocks": blocks,
        "growth_ms_per_1000_calls": round(growth, 4),
    }


def main() -> None:
    """Run the measurement and print (and optionally write) its JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30_000)
    parser.add_argument("--block", type=int, default=3_000)
    parser.add_argument("--out", type=Path, help="also write the JSON result here")
    args = parser.parse_args()
    if args.block < 1 or args.steps < 2 * args.block:
        parser.error("--steps must be at least two --block's worth, --block at least 1")
    result = asyncio.run(measure(args.steps, args.block))
    text = json.dumps(result, indent=2)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
