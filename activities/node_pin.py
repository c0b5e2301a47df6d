"""The check every mutating activity makes: is this node still the incident's machine?

An incident pins the Node object's UID and provider id at triage
(``gpu_remediation.contracts.NodePin``). A node name can come back as another
machine (EC2 names nodes by private IP, and a replacement may reuse it); an
activity that acts by name (cordon, release, drain, annotate, a host-command
Job, the reboot's confirmation) reads the node first and refuses another
machine with ``NodeReplaced``, which no retry can change. The incident then
closes as ``node_gone``; the new machine gets an incident of its own if its
signals say so (issue 35).
"""

from __future__ import annotations

from typing import Any

from temporalio.exceptions import ApplicationError

from gpu_remediation.contracts import NodePin

NODE_REPLACED = "NodeReplaced"
"""Error type: the node under the incident's name is another machine (non-retryable)."""


def check_pin(node: Any, name: str, pin: NodePin | None) -> None:
    """Refuse ``node`` (a client ``V1Node``) unless it is the machine ``pin`` names.

    Args:
        node: The node as just read.
        name: Its name, for the message.
        pin: The incident's pin; None (a read, or before triage) checks nothing.

    Raises:
        ApplicationError: ``NodeReplaced`` (non-retryable) on another UID or provider id.
    """
    if pin is None:
        return
    uid = (node.metadata.uid if node.metadata else None) or ""
    provider_id = (node.spec.provider_id if node.spec else None) or ""
    if pin.uid and uid != pin.uid:
        raise ApplicationError(
            f"node {name} is another machine now: uid {uid}, the incident pinned {pin.uid}",
            type=NODE_REPLACED,
            non_retryable=True,
        )
    if pin.provider_id and provider_id != pin.provider_id:
        raise ApplicationError(
            f"node {name} is another machine now: provider id {provider_id}, "
            f"the incident pinned {pin.provider_id}",
            type=NODE_REPLACED,
            non_retryable=True,
        )
