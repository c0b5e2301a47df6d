"""Search-attribute keys of the incidents, typed for the SDK.

Kept apart from :mod:`gpu_remediation.ids` so that ids, and everything the node
agent reaches through the domain package, imports no Temporal code: the agent's
image does not ship temporalio (tests/agent/test_import_contract.py).
"""

from __future__ import annotations

from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

# Typed search attributes: registered wherever a server is started (see
# gpu_remediation.temporal_setup). An unregistered attribute makes the
# workflow task retry forever, so every key must be listed in ALL.
SA_NODE = SearchAttributeKey.for_keyword("GpuNode")
SA_NODE_POOL = SearchAttributeKey.for_keyword("GpuNodePool")
SA_FAULT_CLASS = SearchAttributeKey.for_keyword("GpuFaultClass")
SA_RUNG = SearchAttributeKey.for_keyword("RemediationRung")
SA_OUTCOME = SearchAttributeKey.for_keyword("RemediationOutcome")
SA_CLUSTER = SearchAttributeKey.for_keyword("GpuCluster")
# The machine (spec.providerID) triage pinned: a node's earlier incidents and
# budgets are counted for the same machine only, not for a new instance under a
# reused name (issue 35).
SA_PROVIDER_ID = SearchAttributeKey.for_keyword("GpuNodeProviderId")

ALL_SEARCH_ATTRIBUTES = (
    SA_NODE,
    SA_NODE_POOL,
    SA_FAULT_CLASS,
    SA_RUNG,
    SA_OUTCOME,
    SA_CLUSTER,
    SA_PROVIDER_ID,
)


def start_search_attributes(cluster: str, node: str) -> TypedSearchAttributes:
    """The attributes a node incident starts with (triage adds pool and fault class).

    Set by the starter so the incident's row in the UI names its node from the
    first moment, even while triage waits for the node to be read.
    """
    return TypedSearchAttributes(
        [SearchAttributePair(SA_CLUSTER, cluster), SearchAttributePair(SA_NODE, node)]
    )
