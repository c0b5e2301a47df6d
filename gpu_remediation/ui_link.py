"""Where an operator looks at incidents in the Temporal UI: the list's address and columns.

The UI (2.x) takes the visibility query in the list's URL (``?query=``) and,
with ``savedQuery=NAME``, saves it as a view of that name in the browser.
Columns are not part of a URL or a saved view: the UI keeps them per browser
(local storage ``namespace-workflow-table-columns``), so an operator adds
:data:`INCIDENT_COLUMNS` once with "Configure columns" (docs/operations.md);
the browser test presets them the same way the UI stores them.
"""

from __future__ import annotations

from urllib.parse import quote, urlencode

from gpu_remediation.ids import NODE_WORKFLOW_TYPE, node_workflow_id_prefix

INCIDENT_COLUMNS = (
    "GpuNode",
    "GpuNodePool",
    "GpuFaultClass",
    "RemediationRung",
    "RemediationOutcome",
)
"""Search-attribute columns that tell an incident's story in the UI's list, in order."""

LEADING_COLUMNS = ("Status",)
"""The UI's own columns shown before them."""
TRAILING_COLUMNS = ("Workflow ID", "Start")
"""The UI's own columns shown after them (Workflow ID links to the incident's page).

Run ID, Type and End are left out: with the incidents-only query the type is
always the same, and the list fits a laptop's screen without them."""

COLUMNS_STORAGE_KEY = "namespace-workflow-table-columns"
"""Where the UI keeps each namespace's workflow-list columns (browser local storage)."""


def incidents_query(cluster: str | None = None) -> str:
    """The visibility query for node incidents only (no semaphore, no permit guards).

    Filtered by workflow type, so the plumbing workflows (the replacement
    semaphore, the permit-guard children) are left out; with a cluster, by
    its workflow id prefix too (set from the start, unlike the search attributes).

    Raises:
        ValueError: If the cluster name is not valid.
    """
    query = f"WorkflowType = '{NODE_WORKFLOW_TYPE}'"
    if cluster is not None:
        query += f" AND WorkflowId STARTS_WITH '{node_workflow_id_prefix(cluster)}'"
    return query


def incidents_url(
    ui_url: str,
    namespace: str = "default",
    cluster: str | None = None,
    *,
    save_as: str | None = None,
) -> str:
    """The UI's workflow list showing node incidents only.

    Args:
        ui_url: The UI's base address (``http://127.0.0.1:8233``).
        namespace: The Temporal namespace.
        cluster: Only this cluster's incidents; all clusters when None.
        save_as: Also save the query as a view of this name in the browser
            that opens the link (each opening adds it again: use it once).

    Raises:
        ValueError: If the cluster name is not valid.
    """
    params = {"query": incidents_query(cluster)}
    if save_as:
        params["savedQuery"] = save_as
    base = ui_url.rstrip("/")
    return f"{base}/namespaces/{quote(namespace, safe='')}/workflows?" + urlencode(
        params, quote_via=quote
    )


def incident_url(ui_url: str, workflow_id: str, namespace: str = "default") -> str:
    """The UI's page of one incident (its latest run)."""
    base = ui_url.rstrip("/")
    return f"{base}/namespaces/{quote(namespace, safe='')}/workflows/{quote(workflow_id, safe='')}"


def column_settings(namespace: str = "default") -> dict[str, list[dict[str, str]]]:
    """The list's columns as the UI stores them, with the incident columns added."""
    labels = (*LEADING_COLUMNS, *INCIDENT_COLUMNS, *TRAILING_COLUMNS)
    return {namespace: [{"label": label} for label in labels]}
