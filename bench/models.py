"""Models of the bench workflows (a passed-through module, as the sandbox needs)."""

from __future__ import annotations

from datetime import timedelta

from pydantic import Field

from gpu_remediation.models import Model


class BenchHolderInput(Model):
    """What a bench holder acquires, and how much it does while holding."""

    semaphore_workflow_id: str
    request_id: str
    capacity: int
    lease: timedelta = timedelta(hours=1)
    acquire_timeout: timedelta = timedelta(minutes=10)
    hold_activities: int = Field(default=0, ge=0)
    """No-op activities run while holding; 0 closes in the task that saw the grant."""
