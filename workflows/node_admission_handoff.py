"""An incident's hand-off to node admission (ADR 011).

A node the incident rebooted, repaired or replaced takes work again only after
its burn-in passes.

Before the incident releases a node it holds the node behind the startup
taint when the boot changed (a reboot) or the node was never admitted, and
starts that boot's admission; the release then lifts only the quarantine. A
replacement node gets its admission started too (the watcher starts the same
one when it sees the tainted node: the start is idempotent), but only if it
registered behind the startup taint: without it in the NodePool the node has
taken work already and is left alone (``UNTAINTED_REPLACEMENT_PATCH``). Behind
``workflow.patched(ADMISSION_HANDOFF_PATCH)`` and the policy's
``admission.enabled`` / ``after_incidents``.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from gpu_remediation import admission_models as a
    from gpu_remediation.admission_models import AdmissionTrigger
    from gpu_remediation.ids import INCIDENT_HOLD_TAINT_VALUE, Activities

from workflows.node_actions import BOOKKEEPING_RETRY
from workflows.node_incident import failure_cause
from workflows.node_view import IncidentView

ADMISSION_HANDOFF_PATCH = "admission-handoff"
UNTAINTED_REPLACEMENT_PATCH = "admission-untainted-replacement"


class AdmissionHandoff(IncidentView):
    """Hands a node the incident is done with to its admission."""

    def _hands_to_admission(self) -> bool:
        gate = self._policy.admission
        if not gate.enabled or not gate.after_incidents or self._dry_run:
            return False
        return workflow.patched(ADMISSION_HANDOFF_PATCH)

    async def _admission_before_release(self) -> None:
        """Gate the node's current boot if it rebooted or was never admitted."""
        if not self._hands_to_admission():
            return
        before = self._health.boot_id if self._health is not None else ""
        verification = self._policy.verification
        verified = verification.diag_level if verification.enabled else None
        await self._hand_over(self._input.node, rebooted_from=before, verified=verified)

    async def _admission_of_replacement(self, new_node: str | None) -> None:
        """Start the burn-in of the node that replaced this one."""
        if new_node and self._hands_to_admission():
            await self._hand_over(new_node, rebooted_from=None, verified=None)

    async def _hand_over(
        self, node: str, *, rebooted_from: str | None, verified: int | None
    ) -> None:
        replacement = node != self._input.node
        info = workflow.info()
        try:
            hold: a.AdmissionHold = await workflow.execute_activity(
                Activities.HOLD_FOR_ADMISSION,
                a.HoldForAdmissionInput(node=node, admission_id=info.workflow_id, add_taint=False),
                result_type=a.AdmissionHold,
                start_to_close_timeout=self._policy.timeouts.bookkeeping,
                retry_policy=BOOKKEEPING_RETRY,
                summary=f"read {node} for its admission",
            )
            if not hold.exists or not hold.boot_id or hold.admitted_boot == hold.boot_id:
                return  # gone, or this boot already passed
            if replacement and not hold.tainted and workflow.patched(UNTAINTED_REPLACEMENT_PATCH):
                # Its NodePool has no startup taint: the node took work when it
                # turned Ready (the pods that made Karpenter launch it). Tainting
                # it now and burning in GPUs a job holds would fail the job's node.
                self._record.decide(
                    "admission",
                    f"{node} not gated",
                    "registered without the startup taint (add it to the NodePool)",
                )
                return
            rebooted = rebooted_from is not None and hold.boot_id != rebooted_from
            if not (replacement or rebooted or hold.tainted):
                return  # same boot, admitted before the gate existed: nothing to gate
            trigger: AdmissionTrigger = (
                "replacement" if replacement else "reboot" if rebooted else "repaired"
            )
            hold = await workflow.execute_activity(
                Activities.HOLD_FOR_ADMISSION,
                a.HoldForAdmissionInput(
                    node=node,
                    boot_id=hold.boot_id,
                    admission_id=info.workflow_id,
                    add_taint=True,
                    # The watcher would otherwise race this start with a bare one.
                    taint_value=INCIDENT_HOLD_TAINT_VALUE,
                ),
                result_type=a.AdmissionHold,
                start_to_close_timeout=self._policy.timeouts.bookkeeping,
                retry_policy=BOOKKEEPING_RETRY,
                summary=f"hold {node} behind the startup taint",
            )
            started: a.StartAdmissionResult = await workflow.execute_activity(
                Activities.START_ADMISSION,
                a.StartAdmissionInput(
                    admission=a.AdmissionInput(
                        cluster=self._input.cluster,
                        node=node,
                        boot_id=hold.boot_id,
                        policy=self._policy,
                        trigger=trigger,
                        first_boot=replacement,
                        replaces=self._input.node if replacement else None,
                        verified_diag_level=verified,
                        semaphore_workflow_id=self._input.semaphore_workflow_id,
                    )
                ),
                result_type=a.StartAdmissionResult,
                start_to_close_timeout=self._policy.timeouts.bookkeeping,
                retry_policy=BOOKKEEPING_RETRY,
                summary=f"start the burn-in of {node}",
            )
        except ActivityError as err:
            self._record.decide("admission", f"hand-off of {node} failed", failure_cause(err))
            return
        self._record.decide(
            "admission", f"{node} handed to admission ({trigger})", started.workflow_id
        )
