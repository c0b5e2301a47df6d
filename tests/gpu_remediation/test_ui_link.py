"""The UI link: the incidents-only list, and the columns as the UI stores them."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from gpu_remediation.search_attributes import ALL_SEARCH_ATTRIBUTES
from gpu_remediation.ui_link import (
    INCIDENT_COLUMNS,
    column_settings,
    incident_url,
    incidents_query,
    incidents_url,
)


def test_the_list_link_carries_the_incidents_only_query() -> None:
    url = incidents_url("http://ui:8233/", "prod", "eu-1")
    parts = urlsplit(url)
    assert parts.path == "/namespaces/prod/workflows"
    assert parse_qs(parts.query) == {
        "query": [
            "WorkflowType = 'NodeRemediation' AND WorkflowId STARTS_WITH 'gpu-remediation/eu-1/'"
        ]
    }


def test_without_a_cluster_every_clusters_incidents_are_listed() -> None:
    assert incidents_query() == "WorkflowType = 'NodeRemediation'"


def test_a_saved_view_is_asked_for_by_name() -> None:
    query = parse_qs(urlsplit(incidents_url("http://ui", save_as="GPU incidents")).query)
    assert query["savedQuery"] == ["GPU incidents"]


def test_a_bad_cluster_name_is_refused() -> None:
    with pytest.raises(ValueError, match="cluster"):
        incidents_query("bad cluster'")


def test_an_incident_page_link_escapes_the_workflow_id() -> None:
    assert incident_url("http://ui", "gpu-remediation/c/n1") == (
        "http://ui/namespaces/default/workflows/gpu-remediation%2Fc%2Fn1"
    )


def test_every_column_is_a_registered_search_attribute() -> None:
    registered = {key.name for key in ALL_SEARCH_ATTRIBUTES}
    assert set(INCIDENT_COLUMNS) <= registered
    labels = [column["label"] for column in column_settings("ns")["ns"]]
    assert labels[0] == "Status"
    assert labels[1 : 1 + len(INCIDENT_COLUMNS)] == list(INCIDENT_COLUMNS)
