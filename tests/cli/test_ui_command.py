"""`remediate ui`: the link to the incidents-only list, or to one incident's page."""

from __future__ import annotations

from tests.cli.conftest import invoke, parsed


async def test_ui_prints_the_incident_list_link_and_the_columns_to_add() -> None:
    result = await invoke("ui", "--cluster", "prod", "--ui-url", "http://temporal-ui:8080")
    assert result.exit_code == 0, result.stderr
    first, columns = result.stdout.splitlines()[:2]
    assert first.startswith("http://temporal-ui:8080/namespaces/default/workflows?query=")
    assert "NodeRemediation" in first
    assert "gpu-remediation%2Fprod%2F" in first
    assert "GpuNode, GpuNodePool, GpuFaultClass, RemediationRung, RemediationOutcome" in columns


async def test_ui_json_and_the_environments_address_and_namespace() -> None:
    env = {"TEMPORAL_UI_URL": "https://ui.example", "TEMPORAL_NAMESPACE": "gpu"}
    shown = parsed(await invoke("ui", "--json", "--save-view", "GPU incidents", env=env))
    assert shown["url"].startswith("https://ui.example/namespaces/gpu/workflows?query=")
    assert shown["url"].endswith("&savedQuery=GPU%20incidents")
    assert shown["query"] == "WorkflowType = 'NodeRemediation'"
    assert shown["columns"][0] == "GpuNode"


async def test_ui_for_a_node_links_its_incident_page() -> None:
    shown = parsed(await invoke("ui", "gpu-7", "--cluster", "prod", "--json"))
    assert shown["url"] == (
        "http://localhost:8233/namespaces/default/workflows/gpu-remediation%2Fprod%2Fgpu-7"
    )


async def test_ui_refuses_a_node_without_a_cluster_and_a_bad_address() -> None:
    no_cluster = await invoke("ui", "gpu-7", env={"GPU_REMEDIATION_CLUSTER": ""})
    assert no_cluster.exit_code == 2
    assert "--cluster" in no_cluster.stderr
    bad = await invoke("ui", "--ui-url", "ftp://x")
    assert bad.exit_code == 2
    assert "http://" in bad.stderr
