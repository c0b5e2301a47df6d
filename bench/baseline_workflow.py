"""The ladder benchmark's baseline: N no-op activities in a row, nothing else.

It is started the same way as an incident (signal-with-start, one signal), so
the only difference to the ladder is what the node workflow does in between.
Kept free of side effects: the sandbox re-imports this module.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow

NOOP_ACTIVITY = "bench_noop"
GO_SIGNAL = "go"


@activity.defn(name=NOOP_ACTIVITY)
async def noop_activity(step: int) -> int:
    """Return at once."""
    return step


@workflow.defn(name="BenchBaseline")
class BaselineWorkflow:
    """Runs ``steps`` no-op activities sequentially."""

    def __init__(self) -> None:
        self._signals = 0

    @workflow.run
    async def run(self, steps: int) -> int:
        """Run the activities; return how many ran."""
        for step in range(steps):
            await workflow.execute_activity(
                NOOP_ACTIVITY, step, start_to_close_timeout=timedelta(seconds=60)
            )
        return steps

    @workflow.signal(name=GO_SIGNAL)
    def go(self, payload: str) -> None:
        """Counterpart of the incident's evidence signal (signal-with-start)."""
        self._signals += 1
