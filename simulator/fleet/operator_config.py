"""The human operator model's settings (``simulator.fleet.operator``): delays and staff.

Defaults are assumptions, stated in ``simulator/fleet/operator.py``.
"""

from __future__ import annotations

import math
import random
from datetime import timedelta

from pydantic import BaseModel, ConfigDict, Field

from gpu_remediation.policy import Duration


class LogNormal(BaseModel):
    """A positive duration, log-normally distributed: ``median`` and the log's ``sigma``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    median: Duration = Field(gt=timedelta(0))
    sigma: float = Field(default=0.8, ge=0, le=5)

    def draw(self, rng: random.Random) -> float:
        """One duration in seconds."""
        return float(self.median.total_seconds() * math.exp(self.sigma * rng.gauss(0.0, 1.0)))


class OperatorConfig(BaseModel):
    """The people who answer the remediation's tickets (assumed defaults; see the module)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    response: LogNormal = Field(
        default=LogNormal(median=timedelta(minutes=30), sigma=1.0),
        description="From a ticket to a person looking at it: an assumption (no public "
        "source gives on-call response times for GPU nodes).",
    )
    repair: LogNormal = Field(
        default=LogNormal(median=timedelta(hours=1), sigma=0.7),
        description="A person's work on a node once looked at: an assumption.",
    )
    staff: int = Field(
        default=2, ge=1, le=1000, description="Tickets worked at once: an assumption."
    )
