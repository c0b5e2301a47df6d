"""The emulated cluster's store with every seeding helper, one concern per module.

- ``base.py``: create-or-overwrite, existence, finalizers;
- ``nodes.py``: Nodes and NodeClaims; ``pods.py``: Pods and PDBs;
- ``containers.py``: container states and logs; ``jobs.py``: Job status and pods;
- ``objects.py``: the pure object pieces (conditions, owner references).
"""

from __future__ import annotations

from .containers import ContainerSeeding
from .jobs import JobSeeding
from .nodes import NodeSeeding
from .pods import PodSeeding


class KubeStore(NodeSeeding, PodSeeding, ContainerSeeding, JobSeeding):
    """The emulated cluster with seeding and mutation helpers (see :class:`ApiStore`).

    Args:
        history_size: Changes retained for watches (older resourceVersions get 410).
        clock: Returns "now" (UTC); injectable for virtual time.
        pod_grace_scale: Scale of graceful pod deletion (see :class:`ApiStore`).
    """
