"""PodDisruptionBudget status (the disruption controller's part) and the eviction checks.

Status follows ``pkg/controller/disruption``: an integer ``minAvailable`` is compared with
the number of matching pods; a percentage ``minAvailable`` or any ``maxUnavailable`` is
computed against the expected scale. Without workload controllers the emulator takes the
expected scale from :meth:`KubeStore.set_workload_scale` for pods whose controller owner
has one registered, and counts every other non-terminal matching pod as one.
``disruptionsAllowed`` is ``currentHealthy - desiredHealthy`` floored at 0, and 0 when no
pods are expected. Eviction follows ``pkg/registry/core/pod/storage/eviction.go``: an
allowed eviction first gives the pod the ``DisruptionTarget`` condition
(``addConditionAndDeletePod``), then deletes it, so a Job's ``podFailurePolicy`` can tell
a disruption from a failure of the pod itself.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from . import errors
from .selectors import selector_from_object

JSON = dict[str, Any]
ScaleKey = tuple[str, str, str]  # (namespace, owner kind, owner name)

TERMINAL_PHASES = ("Succeeded", "Failed")

DISRUPTION_TARGET = "DisruptionTarget"
EVICTION_REASON = "EvictionByEvictionAPI"
EVICTION_MESSAGE = "Eviction API: evicting"
"""The condition the API server writes on an evicted pod (``eviction.go``, Kubernetes 1.26+)."""


def pod_ready(pod: JSON) -> bool:
    """Whether the pod's Ready condition is True (``IsPodReady``)."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def pod_healthy(pod: JSON) -> bool:
    """Counted as healthy by the disruption controller: running, Ready, not deleting."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return (pod.get("status") or {}).get("phase") == "Running" and pod_ready(pod)


def pdb_matches(pdb: JSON, pod: JSON) -> bool:
    """Whether the PDB's selector selects the pod (a null selector selects nothing)."""
    selector = selector_from_object((pdb.get("spec") or {}).get("selector"))
    if selector is None:
        return False
    return selector.matches((pod.get("metadata") or {}).get("labels"))


def parse_int_or_percent(value: Any, field: str) -> tuple[int, bool]:
    """Parse an IntOrString budget value into ``(number, is_percent)``.

    Raises:
        ApiError: 422 for a negative number or a string that is not ``N%``.
    """
    if isinstance(value, bool):
        raise errors.unprocessable(f"{field}: invalid value {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise errors.unprocessable(f"{field}: must be greater than or equal to 0")
        return value, False
    if isinstance(value, str) and value.endswith("%") and value[:-1].isdigit():
        pct = int(value[:-1])
        if pct > 100:
            raise errors.unprocessable(f"{field}: must be no more than 100%")
        return pct, True
    raise errors.unprocessable(f'{field}: Invalid value: "{value}": a valid percent string must be')


def validate_pdb_spec(spec: Any) -> None:
    """Reject specs the real validation rejects.

    Raises:
        ApiError: 422 when both budgets are set or a value is malformed.
    """
    if not isinstance(spec, dict):
        raise errors.unprocessable("spec: Required value")
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        raise errors.unprocessable(
            "spec: Invalid value: minAvailable and maxUnavailable cannot be both set"
        )
    for field in ("minAvailable", "maxUnavailable"):
        if spec.get(field) is not None:
            parse_int_or_percent(spec[field], f"spec.{field}")
    selector_from_object(spec.get("selector"))


def _expected_scale(pods: list[JSON], scales: Mapping[ScaleKey, int]) -> int:
    counted: set[ScaleKey] = set()
    total = 0
    for pod in pods:
        meta = pod.get("metadata") or {}
        owner = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
        key: ScaleKey | None = None
        if owner is not None:
            key = (str(meta.get("namespace", "")), str(owner.get("kind")), str(owner.get("name")))
        if key is not None and key in scales:
            if key not in counted:
                counted.add(key)
                total += scales[key]
        else:
            total += 1
    return total


def compute_status(
    pdb: JSON, pods: Iterable[JSON], scales: Mapping[ScaleKey, int], now: str
) -> JSON:
    """Compute a PDB's status from the pods in its namespace (``pods`` is only read)."""
    spec = pdb.get("spec") or {}
    selector = selector_from_object(spec.get("selector"))
    matching = (
        []
        if selector is None
        else [
            p
            for p in pods
            if selector.matches((p.get("metadata") or {}).get("labels"))
            and (p.get("status") or {}).get("phase") not in TERMINAL_PHASES
        ]
    )
    healthy = sum(1 for p in matching if pod_healthy(p))
    expected = 0
    desired = 0
    if spec.get("maxUnavailable") is not None:
        expected = _expected_scale(matching, scales)
        number, pct = parse_int_or_percent(spec["maxUnavailable"], "spec.maxUnavailable")
        unavailable = math.ceil(expected * number / 100) if pct else number
        desired = max(0, expected - unavailable)
    elif spec.get("minAvailable") is not None:
        number, pct = parse_int_or_percent(spec["minAvailable"], "spec.minAvailable")
        if pct:
            expected = _expected_scale(matching, scales)
            desired = math.ceil(expected * number / 100)
        else:
            expected = len(matching)
            desired = number
    allowed = healthy - desired
    if expected <= 0 or allowed <= 0:
        allowed = 0
    generation = (pdb.get("metadata") or {}).get("generation", 1)
    old_conditions = (pdb.get("status") or {}).get("conditions") or []
    status_word = "True" if allowed > 0 else "False"
    old = next((c for c in old_conditions if c.get("type") == "DisruptionAllowed"), None)
    transition = (
        old.get("lastTransitionTime", now)
        if old is not None and old.get("status") == status_word
        else now
    )
    condition = {
        "type": "DisruptionAllowed",
        "status": status_word,
        "reason": "SufficientPods" if allowed > 0 else "InsufficientPods",
        "message": "",
        "observedGeneration": generation,
        "lastTransitionTime": transition,
    }
    return {
        "observedGeneration": generation,
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "conditions": [condition],
    }


def check_eviction(pod: JSON, pdbs: list[JSON], status_of: dict[str, JSON]) -> None:
    """Decide whether evicting ``pod`` is allowed given the namespace's PDBs.

    Args:
        pod: The pod to evict.
        pdbs: Every PDB in the pod's namespace.
        status_of: Fresh status per PDB name.

    Raises:
        ApiError: 500 when more than one PDB selects the pod, 429 when the budget
            allows no disruption.
    """
    phase = (pod.get("status") or {}).get("phase")
    if (pod.get("metadata") or {}).get("deletionTimestamp") or phase in (
        *TERMINAL_PHASES,
        "Pending",
    ):
        # canIgnorePDB: terminal, pending or already terminating pods evict freely.
        return
    matching = [p for p in pdbs if pdb_matches(p, pod)]
    if len(matching) > 1:
        raise errors.internal(
            "This pod has more than one PodDisruptionBudget, which the eviction subresource "
            "does not support."
        )
    if not matching:
        return
    pdb = matching[0]
    name = pdb["metadata"]["name"]
    status = status_of[name]
    policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") or "IfHealthyBudget"
    if not pod_ready(pod):
        if policy == "AlwaysAllow":
            return
        if status["desiredHealthy"] > 0 and status["currentHealthy"] >= status["desiredHealthy"]:
            return
    if status["disruptionsAllowed"] <= 0:
        raise errors.too_many_requests(
            "Cannot evict pod as it would violate the pod's disruption budget.",
            causes=[
                {
                    "reason": "DisruptionBudget",
                    "message": (
                        f"The disruption budget {name} needs {status['desiredHealthy']} "
                        f"healthy pods and has {status['currentHealthy']} currently"
                    ),
                }
            ],
        )


def add_disruption_target(pod: JSON, now: str) -> bool:
    """Give ``pod`` the eviction's ``DisruptionTarget`` condition, in place.

    Follows ``podutil.UpdatePodCondition``: a condition of that type already there is
    updated (its ``lastTransitionTime`` kept when the status does not change), otherwise
    one is appended.

    Returns:
        Whether the pod changed.
    """
    status = pod.setdefault("status", {})
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        conditions = status["conditions"] = []
    wanted = {
        "type": DISRUPTION_TARGET,
        "status": "True",
        "reason": EVICTION_REASON,
        "message": EVICTION_MESSAGE,
        "lastProbeTime": None,
        "lastTransitionTime": now,
    }
    for index, old in enumerate(conditions):
        if not isinstance(old, dict) or old.get("type") != DISRUPTION_TARGET:
            continue
        if old.get("status") == "True" and old.get("lastTransitionTime"):
            wanted["lastTransitionTime"] = old["lastTransitionTime"]
        wanted["lastProbeTime"] = old.get("lastProbeTime")
        if old == wanted:
            return False
        conditions[index] = wanted
        return True
    conditions.append(wanted)
    return True
