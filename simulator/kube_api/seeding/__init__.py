"""Python-side helpers to seed and mutate the emulated cluster.

Tests and the fleet simulator use these instead of HTTP. Each helper goes through the
same store, so it bumps the resourceVersion, produces watch events and keeps PDB status
current. Objects are complete enough for the official client's model validation (e.g.
``status.nodeInfo`` carries every required field).
"""

from .kube_store import KubeStore
from .objects import JSON, NODEPOOL_LABEL, TERMINATION_FINALIZER, owner_reference

__all__ = ["JSON", "NODEPOOL_LABEL", "TERMINATION_FINALIZER", "KubeStore", "owner_reference"]
