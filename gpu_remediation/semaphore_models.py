"""Models of the replacement semaphore protocol.

Holders ask for a permit by signal, get it by a signal pinned to their run id,
and release it by signal (or through their guard child when they die).
Every message carries the holder's request id, so retries are idempotent.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import Field

from gpu_remediation.models import Model

MAX_CAPACITY = 1000

DEFAULT_CONTINUE_AS_NEW_AFTER_EVENTS = 2_000
"""History length after which the semaphore continues as new (well under the 4,096
events at which the server suggests it), so a replay never walks a long history."""

MIN_CONTINUE_AS_NEW_AFTER_EVENTS = 20
"""A fresh run starts with a handful of events; a lower threshold would continue as
new in a tight loop."""


class PermitRequest(Model):
    """A holder asks for a permit."""

    holder_workflow_id: str = Field(min_length=1)
    holder_run_id: str = Field(min_length=1)
    request_id: str = Field(min_length=1, max_length=256)
    lease: timedelta = Field(gt=timedelta(0))
    pool: str | None = Field(
        default=None, max_length=256, description="The holder's node pool (the per-pool cap)."
    )


class PermitGrant(Model):
    """The semaphore hands a permit to one holder run."""

    request_id: str
    expires_at: datetime


class PermitRelease(Model):
    """A holder (or its guard, or an operator) gives a permit back."""

    request_id: str = Field(min_length=1, max_length=256)
    reason: str = Field(default="released", max_length=512)


class Lease(Model):
    """A granted permit."""

    holder_workflow_id: str
    holder_run_id: str
    request_id: str
    granted_at: datetime
    expires_at: datetime
    pool: str | None = None


class Waiter(Model):
    """A request waiting for a permit, in FIFO order."""

    holder_workflow_id: str
    holder_run_id: str
    request_id: str
    lease: timedelta
    enqueued_at: datetime
    pool: str | None = None


class SemaphoreState(Model):
    """Everything the semaphore carries across continue-as-new."""

    capacity: int = Field(ge=1, le=MAX_CAPACITY)
    pool_capacity: int | None = Field(
        default=None, ge=1, le=MAX_CAPACITY, description="Holders per node pool; None: no cap."
    )
    holders: list[Lease] = Field(default_factory=list)
    waiters: list[Waiter] = Field(default_factory=list)
    recently_released: list[str] = Field(
        default_factory=list, description="Request ids released lately, to drop late repeats."
    )


class SemaphoreInput(Model):
    """Start (or continue) the semaphore."""

    capacity: int = Field(ge=1, le=MAX_CAPACITY)
    pool_capacity: int | None = Field(default=None, ge=1, le=MAX_CAPACITY)
    state: SemaphoreState | None = None
    continue_as_new_after_events: int = Field(
        default=DEFAULT_CONTINUE_AS_NEW_AFTER_EVENTS,
        ge=MIN_CONTINUE_AS_NEW_AFTER_EVENTS,
        description="Continue as new once the run's history is longer than this.",
    )


class SetCapacityInput(Model):
    """Change the number of permits (1..MAX_CAPACITY).

    The bounds are checked by the semaphore's update validator, not here: a
    payload that fails to decode is rejected only as "Failed decoding
    arguments", while the validator tells the operator what is wrong.
    """

    capacity: int


class ForceReleaseInput(Model):
    """An operator takes a permit (or a waiting request) away."""

    request_id: str = Field(min_length=1, max_length=256)
    reason: str = Field(min_length=1, max_length=512)


class PermitGuardInput(Model):
    """The guard child releases its parent's request when the parent closes."""

    semaphore_workflow_id: str
    request_id: str
    holder_workflow_id: str
    holder_run_id: str

    def release(self) -> PermitRelease:
        """The release the guard sends when its holder closed."""
        return PermitRelease(
            request_id=self.request_id,
            reason=f"guard: holder {self.holder_workflow_id}/{self.holder_run_id} closed",
        )
