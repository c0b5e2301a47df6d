"""Remediation policy: the ladder, its budgets and guards, as data.

The policy is loaded from YAML (see ``gpu_remediation.policy_loader``) and
travels inside each workflow's input, so every incident's history records
the exact policy it ran under.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import timedelta
from string import Template
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from gpu_remediation.models import FaultClass, Rung, Urgency
from gpu_remediation.policy_override import (
    PolicyOverrideBase,
    PoolOverrideError,
    deep_merge,
    partial_model,
)

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def _parse_duration(value: Any) -> Any:
    """Accept "30s", "10m", "2h", "7d" besides pydantic's own forms."""
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match:
            return timedelta(seconds=float(match.group(1)) * _UNIT_SECONDS[match.group(2)])
    return value


Duration = Annotated[timedelta, BeforeValidator(_parse_duration)]


class PolicyModel(BaseModel):
    """Base for policy sections: unknown keys are errors (typos must not pass)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class RetrySpec(PolicyModel):
    """Retry policy of one rung's activities."""

    initial_interval: Duration = timedelta(seconds=5)
    backoff: float = Field(default=2.0, ge=1.0, le=10.0)
    max_interval: Duration = timedelta(minutes=2)
    max_attempts: int = Field(default=5, ge=1, le=100)


class RungPolicy(PolicyModel):
    """How one rung runs and how often it may run."""

    enabled: bool = True
    timeout: Duration = Field(
        default=timedelta(minutes=10),
        gt=timedelta(0),
        description="The step's window, all attempts included (a workflow timer); for "
        "quarantine, an API call, the bound of each attempt.",
    )
    retry: RetrySpec = RetrySpec()
    max_attempts: int = Field(
        default=2, ge=1, le=100, description="Attempts per node within `window`."
    )
    window: Duration = Field(default=timedelta(hours=24), gt=timedelta(0))
    requires_approval: bool = False


class FaultClassPolicy(PolicyModel):
    """Where the ladder starts and stops for one fault class."""

    start_rung: Rung | None = Field(description="None: do not touch the node (notify only).")
    max_rung: Rung = Rung.ESCALATE
    grace: Duration = timedelta(0)
    urgency: Urgency = Field(
        default=Urgency.CHECKPOINT_FIRST,
        description="How long the job on the node may go on before the first disruptive rung.",
    )
    diag_level: int | None = Field(
        default=None,
        ge=1,
        le=4,
        description="The DCGM diagnostic level that verifies a step for this class (a slow "
        "GPU needs level 3's bandwidth and stress tests); None: verification.diag_level.",
    )

    @model_validator(mode="after")
    def _start_below_max(self) -> FaultClassPolicy:
        if self.start_rung is not None and self.start_rung.order > self.max_rung.order:
            raise ValueError(f"start_rung {self.start_rung} is above max_rung {self.max_rung}")
        return self


ADDED_FAULT_CLASSES: dict[FaultClass, FaultClassPolicy] = {
    # Issue 18: DCGM configuration findings; as in default_policy.yaml.
    FaultClass.CONFIGURATION: FaultClassPolicy(
        start_rung=Rung.ESCALATE, max_rung=Rung.ESCALATE, urgency=Urgency.WHEN_IDLE
    ),
    # Issue 16: uncontained memory errors (Xid 95, DCGM 81); as in default_policy.yaml.
    FaultClass.UNCONTAINED_ERROR: FaultClassPolicy(
        start_rung=Rung.GPU_RESET, max_rung=Rung.ESCALATE, urgency=Urgency.IMMEDIATE
    ),
    # Issue 33: an EFA link down (it was `unknown`, verified by a GPU-only
    # diagnostic that passed with the link still down); as in default_policy.yaml.
    FaultClass.EFA_LINK_DOWN: FaultClassPolicy(
        start_rung=Rung.REBOOT,
        max_rung=Rung.ESCALATE,
        grace=timedelta(minutes=2),
        urgency=Urgency.CHECKPOINT_FIRST,
    ),
    # Issue 37: a GPU that works but slows its job; as in default_policy.yaml.
    FaultClass.GPU_DEGRADED: FaultClassPolicy(
        start_rung=Rung.GPU_RESET,
        max_rung=Rung.ESCALATE,
        grace=timedelta(minutes=5),
        urgency=Urgency.WHEN_IDLE,
        diag_level=3,
    ),
    # Issue 37: an EFA port that is slow or erring; as in default_policy.yaml.
    FaultClass.EFA_DEGRADED: FaultClassPolicy(
        start_rung=Rung.REBOOT,
        max_rung=Rung.ESCALATE,
        grace=timedelta(minutes=5),
        urgency=Urgency.WHEN_IDLE,
    ),
    # Issue 37: a job's report that the node is slower than its gang; as in
    # default_policy.yaml (and the safe shape `_straggler_is_evidence_only` asks for).
    FaultClass.STRAGGLER: FaultClassPolicy(
        start_rung=Rung.DIAGNOSE,
        max_rung=Rung.DIAGNOSE,
        urgency=Urgency.IDLE_ONLY,
        diag_level=3,
    ),
}
"""Classes added after policies were first recorded, with the default a policy without them gets."""


def _straggler_is_evidence_only(policy: FaultClassPolicy) -> None:
    """Refuse a straggler class that could disrupt work: a tenant's report must not.

    A job's step times are written by the job's owner, so they may at most get
    an idle node diagnosed (``diagnose`` with ``idle_only``), or handed to a
    person (``escalate``), or nothing (no start rung). Only what the diagnostic
    finds names a fault and lifts the ceiling (docs/security.md).
    """
    start, top = policy.start_rung, policy.max_rung
    if start is None:
        return
    if start == Rung.DIAGNOSE and top == Rung.DIAGNOSE and policy.urgency == Urgency.IDLE_ONLY:
        return
    if start == Rung.ESCALATE:
        return
    raise ValueError(
        "fault_classes.straggler: a job's straggler report is a tenant's word, so it may "
        "only diagnose an idle node (start_rung and max_rung diagnose, urgency idle_only), "
        f"escalate, or do nothing (start_rung null); got start_rung {start}, max_rung {top}, "
        f"urgency {policy.urgency}"
    )


class EfaLoadTestPolicy(PolicyModel):
    """The slow EFA port's load test: ``fi_pingpong`` in loopback on every device (issue 37).

    The agent's counters alone cannot verify a quarantined port: an idle port
    retransmits nothing. This loads each device for a few seconds and judges what
    it did under the load (docs/concepts.md, "Verifying a slow EFA port").
    """

    enabled: bool = True
    max_counter_increase: int = Field(
        default=100,
        ge=0,
        le=1_000_000_000,
        description="Most retransmit timeouts (and, apart, drops) a device may add during its "
        "run: the burst AWS's own EFA monitor lets pass before it warns.",
    )
    min_bandwidth_fraction: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="A device below this fraction of the median throughput of the node's "
        "devices fails (judged with three devices or more; 0 turns it off). An assumption: "
        "no public single-node floor exists.",
    )


class VerificationPolicy(PolicyModel):
    """The diagnostic run after every corrective step."""

    enabled: bool = True
    diag_level: int = Field(default=2, ge=1, le=4)
    timeout: Duration = Field(default=timedelta(minutes=20), gt=timedelta(0))
    efa_settle: Duration = Field(
        default=timedelta(seconds=90),
        ge=timedelta(0),
        description="Before an EFA fault's check after a step, wait this long for the node "
        "agent's next cycles (NPD starts a new boot with its default, healthy condition).",
    )
    efa_degraded_settle: Duration = Field(
        default=timedelta(minutes=6),
        ge=timedelta(0),
        description="The same for a slow EFA port (EfaDegraded): the agent reports error "
        "counters only once their rate held over its span (300 s by default), plus a cycle.",
    )
    efa_load_test: EfaLoadTestPolicy = EfaLoadTestPolicy()


class ReplacementRatePolicy(PolicyModel):
    """How many nodes of one pool may be replaced within a window (issue 35).

    The concurrency cap bounds replacements at once, not in all: a burn-in check
    that wrongly fails every new node would replace new nodes endlessly, two at a
    time, and the breaker never trips because replaced nodes leave. Past the
    budget, a replacement goes to a person instead. Absent in older histories:
    today's defaults.
    """

    enabled: bool = True
    window: Duration = Field(default=timedelta(hours=24), gt=timedelta(0))
    max_fraction: float = Field(
        default=0.1, gt=0, le=1, description="Of the pool's nodes, replaced within `window`."
    )
    min_count: int = Field(
        default=3, ge=1, le=10_000, description="The budget of a small pool, whatever its size."
    )

    def budget(self, pool_nodes: int) -> int:
        """Replacements allowed within the window for a pool of ``pool_nodes`` nodes."""
        return max(self.min_count, int(self.max_fraction * pool_nodes))


class ReplacementPolicy(PolicyModel):
    """Fleet-wide cap on concurrent replacements, and a rate budget per pool."""

    max_concurrent: int = Field(default=2, ge=1, le=1000)
    max_per_pool: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description="Replacements at once in one node pool (issue 35); None: only the fleet cap.",
    )
    permit_wait_timeout: Duration = Field(default=timedelta(hours=6), gt=timedelta(0))
    lease: Duration = Field(
        default=timedelta(hours=2),
        gt=timedelta(0),
        description="A permit not released by then is reclaimed.",
    )
    rate: ReplacementRatePolicy = ReplacementRatePolicy()


class StepBudget(PolicyModel):
    """How many nodes may be in one disruptive step at once."""

    fleet: int = Field(ge=1, le=1000, description="At once, in the whole fleet.")
    per_pool: int | None = Field(
        default=None, ge=1, le=1000, description="At once, in one node pool; None: no pool cap."
    )


class DisruptionPolicy(PolicyModel):
    """Caps on every disruptive step, fleet-wide and per pool (issue 35).

    A storm of wrong signals quarantines and diagnoses every node it names, but
    drains, resets and reboots at most these many at once (replacements have
    ``replacement``'s semaphore). Each step is a semaphore; a node waits for a
    permit quarantined, and goes back to service if its signals clear while it
    waits. A drain's permit is held until the node is back in service or
    handed to a person; a reset's or reboot's while the step runs. Fleet-wide:
    not overridable per pool. Absent in older histories: today's defaults.
    """

    enabled: bool = True
    stop_gpu_work: StepBudget = StepBudget(fleet=50, per_pool=20)
    gpu_reset: StepBudget = StepBudget(fleet=50, per_pool=20)
    reboot: StepBudget = StepBudget(fleet=20, per_pool=10)
    permit_wait_timeout: Duration = Field(
        default=timedelta(hours=6),
        gt=timedelta(0),
        description="A node that gets no permit by then is handed to a person.",
    )
    drain_lease: Duration = Field(
        default=timedelta(days=4),
        gt=timedelta(0),
        description="A drain permit not given back by then is reclaimed (its holder is "
        "gone without its guard); longer than the breaker's longest hold.",
    )

    def budget(self, rung: Rung) -> StepBudget | None:
        """The budget of ``rung``; None for a rung without one."""
        return {
            Rung.STOP_GPU_WORK: self.stop_gpu_work,
            Rung.GPU_RESET: self.gpu_reset,
            Rung.REBOOT: self.reboot,
        }.get(rung)


class BreakerPolicy(PolicyModel):
    """Stops disruptive rungs when too much of a node pool looks unhealthy."""

    max_unhealthy_fraction: float = Field(default=0.2, gt=0.0, le=1.0)
    min_unhealthy_nodes: int = Field(
        default=2,
        ge=1,
        description="The breaker never opens for fewer unhealthy nodes (small pools).",
    )
    per_pool: dict[str, float] = Field(
        default_factory=dict, description="Pool name to its own max_unhealthy_fraction."
    )
    recheck_interval: Duration = Field(
        default=timedelta(minutes=5),
        gt=timedelta(0),
        description="While the breaker holds an incident, look at the pool again this often.",
    )
    max_hold: Duration = Field(
        default=timedelta(days=3),
        gt=timedelta(0),
        description="An incident held this long by an open breaker, its signal still in "
        "force, is handed to a person.",
    )

    @model_validator(mode="after")
    def _fractions(self) -> BreakerPolicy:
        for pool, fraction in self.per_pool.items():
            if not 0.0 < fraction <= 1.0:
                raise ValueError(f"per_pool[{pool}] must be in (0, 1], got {fraction}")
        return self

    def threshold_for(self, pool: str | None) -> float:
        """Return the unhealthy fraction above which ``pool``'s breaker opens."""
        if pool is not None and pool in self.per_pool:
            return self.per_pool[pool]
        return self.max_unhealthy_fraction

    def is_open(self, pool: str | None, unhealthy: int, total: int) -> bool:
        """Whether disruptive rungs are blocked for ``pool``.

        Args:
            pool: Node pool name (None for nodes outside any pool).
            unhealthy: Nodes of the pool that look unhealthy now.
            total: Nodes in the pool.
        """
        if unhealthy < self.min_unhealthy_nodes or total <= 0:
            return False
        return unhealthy / total > self.threshold_for(pool)


class RepeatOffenderPolicy(PolicyModel):
    """Nodes with many recent incidents go straight to a stronger rung."""

    enabled: bool = True
    incidents: int = Field(default=3, ge=1, description="Incidents within `window`.")
    window: Duration = Field(default=timedelta(days=7), gt=timedelta(0))
    start_rung: Rung = Rung.REPLACE


class OperatorPolicy(PolicyModel):
    """How long the workflow waits for people."""

    approval_timeout: Duration = Field(default=timedelta(hours=24), gt=timedelta(0))
    escalation_hold: Duration = Field(
        default=timedelta(days=3),
        ge=timedelta(0),
        description="After escalating, wait this long for an operator's retry/skip/abort.",
    )
    force_requires_authentication: bool = Field(
        default=False,
        description="Honour a forced request (bypassing the breaker and the replacement "
        "permit) only from a requester whose connection authenticated it (mTLS client "
        "certificate); others run unforced. Off by default for the demo and local use.",
    )


# A label key: an optional DNS-subdomain prefix and a name (Kubernetes' rules).
_LABEL_KEY = re.compile(
    r"^(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
DEFAULT_JOB_LABEL_KEYS = (
    "jobset.sigs.k8s.io/jobset-name",
    "batch.kubernetes.io/job-name",
    "training.kubeflow.org/job-name",
)


class JobsPolicy(PolicyModel):
    """How the incident coordinates with the training jobs on its node."""

    enabled: bool = Field(
        default=True, description="false: never ask jobs to checkpoint nor wait for them."
    )
    label_keys: list[str] = Field(
        default_factory=lambda: list(DEFAULT_JOB_LABEL_KEYS),
        min_length=1,
        max_length=20,
        description="Pod label keys, in order, whose value names the pod's job.",
    )
    checkpoint_timeout: Duration = Field(
        default=timedelta(minutes=10),
        gt=timedelta(0),
        description="checkpoint_first: how long to wait for the job's answer.",
    )
    hung_job_deadline: Duration = Field(
        default=timedelta(minutes=7),
        gt=timedelta(0),
        description="checkpoint_first: the wait ends at the latest this long after the "
        "fault was first named (a relapse after the cooldown starts anew). A fault that "
        "stops a rank hangs its whole gang: the job never answers, and its collective "
        "timeout (PyTorch's NCCL default: 10 minutes) fails it unless the node is drained "
        "first, which restarts it without spending its retry budget (ADR 029). Keep it "
        "below the jobs' timeout, with room for the drain.",
    )
    max_defer: Duration = Field(
        default=timedelta(hours=24),
        gt=timedelta(0),
        description="when_idle: how long the node may wait for its job to end or checkpoint.",
    )
    recheck_interval: Duration = Field(
        default=timedelta(minutes=10),
        gt=timedelta(0),
        description="During a wait, look at the node's jobs this often even when the watcher "
        "reports nothing (a pod deleted while it was down sends no event).",
    )

    @model_validator(mode="after")
    def _keys(self) -> JobsPolicy:
        for key in self.label_keys:
            if len(key) > 316 or not _LABEL_KEY.match(key):
                raise ValueError(f"label_keys: {key!r} is not a Kubernetes label key")
        return self


NOTIFY_FIELDS = (
    "node",
    "cluster",
    "incident",
    "fault_class",
    "reason",
    "reference",
    "summary",
    "link",
)
"""What a hand-over notification's template may name (``$node``, ...): each is replaced by
a JSON string (quotes included), so the body stays valid JSON whatever the values hold."""

DEFAULT_NOTIFY_TEMPLATE = (
    '{"text": $summary, "node": $node, "cluster": $cluster, "incident": $incident, '
    '"fault_class": $fault_class, "reason": $reason, "reference": $reference, "link": $link}'
)


def render_notification(template: str, values: Mapping[str, str]) -> str:
    """The notification's body: ``template`` with each field as a JSON string.

    Raises:
        ValueError: The template names a field that is not in ``NOTIFY_FIELDS``, or
            its result is not JSON.
    """
    parsed = Template(template)
    unknown = sorted(set(parsed.get_identifiers()) - set(NOTIFY_FIELDS))
    if unknown or not parsed.is_valid():
        named = ", ".join(unknown) or "a malformed $ placeholder"
        raise ValueError(f"template: unknown field(s) {named}; known: {', '.join(NOTIFY_FIELDS)}")
    body = parsed.substitute({k: json.dumps(values.get(k, "")) for k in NOTIFY_FIELDS})
    try:
        json.loads(body)
    except json.JSONDecodeError as err:
        raise ValueError(f"template: the body is not JSON ({err.msg} at {err.pos})") from err
    return body


class NotifyPolicy(PolicyModel):
    """A webhook told of every hand-over (Slack, PagerDuty, a ticket system's intake).

    The worker POSTs the rendered template with ``Content-Type: application/json`` and
    an ``Idempotency-Key`` (the incident run's id); it retries what may pass later
    (a timeout, 429, 5xx) and gives up on other answers. The URL, or a file holding it
    (a Slack webhook URL is a secret: it stays out of the incident's history), and the
    extra headers' file (``Name: value`` lines, e.g. an Authorization token) are read by
    the worker each time it sends.
    """

    url: str | None = Field(
        default=None, max_length=2048, description="http(s) URL of the webhook."
    )
    url_file: str | None = Field(
        default=None,
        max_length=1024,
        description="A file on the worker holding the URL (for URLs that are secrets).",
    )
    headers_file: str | None = Field(
        default=None,
        max_length=1024,
        description="A file on the worker with extra headers, one 'Name: value' a line.",
    )
    template: str = Field(default=DEFAULT_NOTIFY_TEMPLATE, min_length=2, max_length=8192)
    timeout: Duration = Field(
        default=timedelta(seconds=10), gt=timedelta(0), le=timedelta(minutes=5)
    )
    attempts: int = Field(default=5, ge=1, le=50, description="Sends at most, with backoff.")

    @model_validator(mode="after")
    def _checked(self) -> NotifyPolicy:
        if (self.url is None) == (self.url_file is None):
            raise ValueError("give exactly one of url and url_file")
        if self.url is not None and not HTTP_URL.match(self.url):
            raise ValueError(f"url: expected an http(s) URL, got {self.url!r}")
        render_notification(self.template, {})
        return self


HTTP_URL = re.compile(r"^https?://[^\s/$.?#][^\s]*$", re.IGNORECASE)
"""An http(s) URL with a host and no white space (the webhook's)."""


class EscalationPolicy(PolicyModel):
    """How a node is handed to a person, and when the hand-over ends on its own.

    The defaults are the shipped behaviour. The other settings express
    "a person does it all" (a ticket, nothing else) and "the person's fix
    closes the ticket", e.g. for baselines without automation.
    """

    quarantine_first: bool = Field(
        default=True,
        description="Cordon and taint a node whose ladder starts at escalation before handing "
        "it over; false: only the ticket (label and event), the person decides what to do.",
    )
    notify: NotifyPolicy | None = Field(
        default=None,
        description="A webhook told of every hand-over (none: the node's label and Warning "
        "event only).",
    )
    close_on_recovery: bool = Field(
        default=False,
        description="End a hand-over as soon as every signal has cleared (a person fixed the "
        "node): the incident closes as recovered instead of waiting for an operator's "
        "retry/skip/abort or operator.escalation_hold.",
    )


ConditionStatus = Literal["True", "False", "Unknown"]


class ConditionRule(PolicyModel):
    """A node condition that counts as a problem, and how long it must last."""

    type: str = Field(min_length=1, max_length=316, description="Condition type, e.g. Ready.")
    problem_statuses: list[ConditionStatus] = Field(
        min_length=1, description="Statuses that mean a problem (Ready: False, Unknown)."
    )
    reason_pattern: str | None = Field(
        default=None,
        max_length=1024,
        description="Regular expression the reason must match (search); null: any reason.",
    )
    grace: Duration = Field(
        default=timedelta(0),
        ge=timedelta(0),
        description="How long the problem must last (from its first sighting) before a report.",
    )

    @model_validator(mode="after")
    def _pattern_compiles(self) -> ConditionRule:
        if self.reason_pattern is not None:
            try:
                re.compile(self.reason_pattern)
            except re.error as err:
                raise ValueError(f"reason_pattern is not a regular expression: {err}") from err
        return self

    def matches(self, condition_type: str, status: str, reason: str) -> bool:
        """Return whether a condition with this type, status and reason is a problem."""
        if condition_type != self.type or status not in self.problem_statuses:
            return False
        return self.reason_pattern is None or re.search(self.reason_pattern, reason) is not None


class StragglerPolicy(PolicyModel):
    """When a job's step times make its node a straggler (``triggers.stragglers``).

    Jobs that opt in write each pod's mean time per training step on the pod
    (docs/checkpoint-contract.md, "Step times"); the checkpoint relay compares
    each report with the median of its gang's fresh reports. The approach is
    the one of the straggler studies (Falcon, arXiv 2410.12588, published as
    Greyhound, USENIX ATC '25): compare a rank with its peers, and want it slow
    for a while, not one step. The defaults are assumptions, not measured values.
    """

    enabled: bool = Field(
        default=True,
        description="Read the step times jobs write; false: ignore them (no straggler evidence).",
    )
    margin: float = Field(
        default=0.2,
        gt=0,
        le=10,
        description="Slow means a step time above the gang's median times (1 + margin). "
        "Assumption: above run-to-run step jitter, below the 1.34x average delay that "
        "Falcon/Greyhound measured for jobs under fail-slows.",
    )
    min_steps: int = Field(
        default=200,
        ge=1,
        le=10_000_000,
        description="Steps a pod must stay slow, reports in a row, before its node is reported "
        "(assumption).",
    )
    min_gang: int = Field(
        default=3,
        ge=3,
        le=100_000,
        description="Fresh reports a gang needs before any is judged: with fewer, the median is "
        "one of the two being compared.",
    )
    stale_after: Duration = Field(
        default=timedelta(minutes=15),
        gt=timedelta(0),
        description="A pod's report older than this is left out of its gang (the job stopped "
        "reporting, or the pod hangs).",
    )
    min_span: Duration = Field(
        default=timedelta(minutes=5),
        ge=timedelta(0),
        description="Besides min_steps (which the job counts itself), the detector's own time "
        "a pod must stay slow, over two reports at least, before its node is reported: one "
        "write cannot make a report, and a pod flapping slow and fast reports at most once "
        "per span.",
    )


class TriggerPolicy(PolicyModel):
    """What the node-condition watcher and the alert receiver treat as evidence."""

    node_selector: str = Field(
        default="nvidia.com/gpu.present=true",
        max_length=1024,
        description="Label selector of the nodes the watcher watches.",
    )
    conditions: list[ConditionRule] = Field(default_factory=list, max_length=100)
    alert_node_labels: list[str] = Field(
        default_factory=lambda: ["hostname", "Hostname", "node", "instance"],
        min_length=1,
        max_length=20,
        description="Alert labels, in order, that may name the node.",
    )
    trust_alert_fault_class: bool = Field(
        default=False,
        description=(
            "Honour an alert's fault_class label. Off: the receiver drops the label and the "
            "alert is classified from its Xid or metric alone, so a label carried by a scraped "
            "series cannot choose the repair. Turn on only when every rule routed to the "
            "receiver sets or clears fault_class itself (docs/security.md, Alerts)."
        ),
    )

    stragglers: StragglerPolicy = Field(
        default_factory=StragglerPolicy,
        description="Step times jobs report on their pods (issue 37); absent in older histories.",
    )

    def rule_for(self, condition_type: str, status: str, reason: str) -> ConditionRule | None:
        """Return the first rule that counts this condition as a problem, if any."""
        for rule in self.conditions:
            if rule.matches(condition_type, status, reason):
                return rule
        return None

    def watches(self, condition_type: str) -> bool:
        """Return whether any rule is about this condition type."""
        return any(rule.type == condition_type for rule in self.conditions)


# ----------------------------------------------------------------- admission
# Node admission (issue 20, ADR 011): burn-in before a node takes work.


class NcclCheckPolicy(PolicyModel):
    """The optional burn-in check: NCCL's all-reduce over the node's GPUs, as a Job on the node.

    ``all_reduce_perf`` (NVIDIA nccl-tests) runs in one pod pinned to the node
    (``nodeName``, tolerating the startup taint) with every allocatable GPU; it
    passes when no result is wrong and the bus bandwidth at the largest size is
    at least ``min_bus_bandwidth_gbps`` (a pool's own floor in
    ``per_pool_min_bus_bandwidth_gbps``). Needs the Job RBAC
    (deploy/job-executor/rbac.yaml) and an image with nccl-tests.
    """

    enabled: bool = Field(default=False, description="Run the all-reduce Job in burn-in.")
    image: str = Field(
        default="",
        max_length=512,
        description="An image with nccl-tests' all_reduce_perf on its PATH (required when on).",
    )
    max_bytes: str = Field(
        default="8G",
        pattern=r"^[1-9][0-9]{0,12}[KMG]?$",
        description="all_reduce_perf -e: the largest message size (its bandwidth is judged).",
    )
    min_bus_bandwidth_gbps: float = Field(
        default=300.0,
        gt=0,
        description="Bus bandwidth (GB/s) at the largest size below which the check fails.",
    )
    per_pool_min_bus_bandwidth_gbps: dict[str, float] = Field(
        default_factory=dict, description="Pool name to its own bandwidth floor (GB/s)."
    )

    @model_validator(mode="after")
    def _usable(self) -> NcclCheckPolicy:
        if self.enabled and not self.image:
            raise ValueError("nccl.image is required when nccl.enabled is true")
        for pool, floor in self.per_pool_min_bus_bandwidth_gbps.items():
            if floor <= 0:
                raise ValueError(f"per_pool_min_bus_bandwidth_gbps[{pool}] must be > 0")
        return self

    def floor_for(self, pool: str | None) -> float:
        """Return the bus bandwidth floor (GB/s) of ``pool``."""
        if pool is not None and pool in self.per_pool_min_bus_bandwidth_gbps:
            return self.per_pool_min_bus_bandwidth_gbps[pool]
        return self.min_bus_bandwidth_gbps


class AdmissionPolicy(PolicyModel):
    """The burn-in a node passes before its startup taint is removed (the admission gate).

    ``enabled`` is the gate's switch: off, a node carrying the startup taint is
    untainted at once (no checks) and incidents hand nothing to admission, so
    a fleet can be compared with the gate on and off. Turn it on together with
    the startup taint on the NodePools (deploy/karpenter).
    """

    enabled: bool = Field(
        default=False, description="Burn-in before a node takes work; off: untaint at once."
    )
    diag_level: int = Field(default=2, ge=1, le=4, description="DCGM diag level of the burn-in.")
    per_pool_diag_level: dict[str, int] = Field(
        default_factory=dict, description="Pool name to its own burn-in diag level."
    )
    efa: bool = Field(
        default=True, description="Require the node agent's EFA check (count, provider, link)."
    )
    settle: Duration = Field(
        default=timedelta(seconds=60),
        ge=timedelta(0),
        description="The agent's EFA verdict is read no sooner than this after burn-in starts.",
    )
    ready_timeout: Duration = Field(
        default=timedelta(minutes=15),
        gt=timedelta(0),
        description="How long a node may take to turn Ready before burn-in fails.",
    )
    check_timeout: Duration = Field(
        default=timedelta(minutes=30), gt=timedelta(0), description="One burn-in check."
    )
    poll_interval: Duration = Field(
        default=timedelta(seconds=30),
        gt=timedelta(0),
        description="While a check runs, the node is re-read this often (gone, rebooted).",
    )
    retry: RetrySpec = RetrySpec(max_attempts=3)
    nccl: NcclCheckPolicy = NcclCheckPolicy()  # absent in histories recorded before it
    first_boot_replaces: bool = Field(
        default=True,
        description="A node failing burn-in on its first boot (dead on arrival) is replaced.",
    )
    after_incidents: bool = Field(
        default=True,
        description="Incidents hand rebooted, replacement and still-gated nodes to admission.",
    )

    @model_validator(mode="after")
    def _levels(self) -> AdmissionPolicy:
        for pool, level in self.per_pool_diag_level.items():
            if not 1 <= level <= 4:
                raise ValueError(f"per_pool_diag_level[{pool}] must be 1..4, got {level}")
        return self

    def diag_level_for(self, pool: str | None) -> int:
        """Return the burn-in diag level of ``pool``."""
        if pool is not None and pool in self.per_pool_diag_level:
            return self.per_pool_diag_level[pool]
        return self.diag_level


class ActivityTimeoutsPolicy(PolicyModel):
    """How soon Temporal gives up on an activity attempt whose worker went silent.

    A SIGKILLed worker's running activities are retried only once these expire,
    so they bound crash recovery. Not how long the work may take (that is each
    rung's ``timeout``): a heartbeating activity runs as long as it keeps
    heartbeating. Absent in histories recorded before it: today's defaults.
    """

    bookkeeping: Duration = Field(
        default=timedelta(seconds=60),
        ge=timedelta(seconds=1),
        le=timedelta(hours=1),
        description="Start-to-close of one attempt of a read or bookkeeping activity.",
    )
    heartbeat: Duration = Field(
        default=timedelta(minutes=2),
        ge=timedelta(seconds=1),
        le=timedelta(hours=1),
        description="A long activity (rungs, burn-in checks) silent this long is retried.",
    )


def _default_rungs() -> dict[Rung, RungPolicy]:
    return {rung: RungPolicy() for rung in Rung}


class _PolicySections(PolicyModel):
    """Every setting of the policy; ``Policy`` adds the per-pool overrides of them."""

    version: int = Field(default=1, ge=1, le=1)
    dry_run: bool = False
    cooldown: Duration = Field(
        default=timedelta(minutes=30),
        ge=timedelta(0),
        description="After a repair the incident stays open this long; new evidence climbs.",
    )
    fault_classes: dict[FaultClass, FaultClassPolicy]
    rungs: dict[Rung, RungPolicy] = Field(default_factory=_default_rungs)
    verification: VerificationPolicy = VerificationPolicy()
    replacement: ReplacementPolicy = ReplacementPolicy()
    breaker: BreakerPolicy = BreakerPolicy()
    repeat_offender: RepeatOffenderPolicy = RepeatOffenderPolicy()
    operator: OperatorPolicy = OperatorPolicy()
    escalation: EscalationPolicy = EscalationPolicy()
    triggers: TriggerPolicy = TriggerPolicy()
    jobs: JobsPolicy = JobsPolicy()
    admission: AdmissionPolicy = AdmissionPolicy()  # issue 20; absent in older histories
    timeouts: ActivityTimeoutsPolicy = ActivityTimeoutsPolicy()  # absent in older histories
    disruption: DisruptionPolicy = DisruptionPolicy()  # issue 35; absent in older histories


if TYPE_CHECKING:
    PolicyOverride: TypeAlias = PolicyOverrideBase
else:
    # Generated from the sections, so every setting can be overridden per pool.
    PolicyOverride = partial_model(
        _PolicySections, base=PolicyOverrideBase, exclude=("version",), name="PolicyOverride"
    )


class Policy(_PolicySections):
    """The whole remediation policy."""

    pools: dict[Annotated[str, Field(min_length=1)], PolicyOverride] = Field(
        default_factory=dict,
        description="Node pool name to its override: any setting but pools and version, "
        "merged over the rest of the policy like a policy file over the defaults.",
    )  # issue 33; absent in older histories

    @model_validator(mode="after")
    def _complete(self) -> Policy:
        if any(fc not in self.fault_classes for fc in ADDED_FAULT_CLASSES):
            # A policy recorded before a class existed (workflow histories,
            # running workflows' inputs) still decodes: the class gets its default.
            added = {fc: p for fc, p in ADDED_FAULT_CLASSES.items() if fc not in self.fault_classes}
            object.__setattr__(self, "fault_classes", {**self.fault_classes, **added})
        missing = [fc.value for fc in FaultClass if fc not in self.fault_classes]
        if missing:
            raise ValueError(f"fault_classes is missing: {', '.join(missing)}")
        _straggler_is_evidence_only(self.fault_classes[FaultClass.STRAGGLER])
        for rung in (Rung.QUARANTINE, Rung.ESCALATE):
            if rung in self.rungs and not self.rungs[rung].enabled:
                # Quarantine guards every disruptive step; escalation is the floor.
                raise ValueError(f"rungs.{rung.value}.enabled cannot be false")
        filled = {rung: self.rungs.get(rung, RungPolicy()) for rung in Rung}
        object.__setattr__(self, "rungs", filled)
        return self

    def rung(self, rung: Rung) -> RungPolicy:
        """Return the policy of one rung."""
        return self.rungs[rung]

    def fault_class(self, fault_class: FaultClass) -> FaultClassPolicy:
        """Return the policy of one fault class."""
        return self.fault_classes[fault_class]

    @model_validator(mode="after")
    def _overrides_apply(self) -> Policy:
        # Refused when the policy is made, not when a node of the pool first needs it.
        for pool, override in self.pools.items():
            try:
                self._overridden(override)
            except ValidationError as err:
                raise PoolOverrideError(pool, err) from err
        return self

    def for_pool(self, pool: str | None) -> Policy:
        """Return the effective policy of a node pool: this one with the pool's override merged in.

        Mappings merge key by key (one field of one rung keeps the rung's other
        fields), any other value replaces this policy's. The result keeps
        ``pools``, so applying the same pool again changes nothing; call it on
        the base policy, not on another pool's effective one. Pure and
        deterministic (workflow code calls it).

        Args:
            pool: The node's pool; None (unknown) or a pool without an override
                returns this policy itself.
        """
        if pool is None or pool not in self.pools:
            return self
        return self._overridden(self.pools[pool])

    def _overridden(self, override: PolicyOverride) -> Policy:
        base = self.model_dump(mode="python", exclude={"pools"})
        # Validated without pools (no recursion), then given this policy's back.
        effective = Policy.model_validate(deep_merge(base, override.model_dump(mode="python")))
        return effective.model_copy(update={"pools": self.pools})
