"""Models of the test holder workflows (kept out of the workflow module so the
sandbox passes them through; see platform notes)."""

from __future__ import annotations

from datetime import datetime, timedelta

from gpu_remediation.models import Model
from gpu_remediation.semaphore_models import PermitGrant


class HolderInput(Model):
    """What a test holder acquires, and how long it holds."""

    semaphore_workflow_id: str
    request_id: str
    capacity: int = 1
    lease: timedelta = timedelta(hours=1)
    acquire_timeout: timedelta = timedelta(minutes=10)
    hold: timedelta | None = None
    """None: hold until the ``finish`` signal."""
    release: bool = True
    """False: never release (the lease must expire)."""
    leave_to_guard: bool = False
    """True: close without releasing, leaving the permit to the guard."""


class HolderReport(Model):
    """What a test holder saw, in workflow time."""

    acquired: bool
    granted_at: datetime | None = None
    released_at: datetime | None = None


class HolderStatus(Model):
    """Queried while the holder runs."""

    requested: bool
    held: bool


class RecordedGrants(Model):
    """Grants a recorder run received."""

    grants: list[PermitGrant]
