"""``remediate ui``: the Temporal UI's list of node incidents, as a link to open or print.

The link carries the visibility query that leaves out the plumbing
workflows (the replacement semaphore and the permit guards); the columns that
tell each incident's story are search attributes an operator adds once in the
UI ("Configure columns"), which keeps them in the browser: the command prints
which (docs/operations.md, "The Temporal UI").
"""

from __future__ import annotations

import os
import webbrowser
from typing import Annotated

import typer

from cli.connection import NamespaceOption, TemporalOptions
from cli.incidents import OptionalNodeArgument
from cli.output import CliError, ExitCode, JsonOption, console, emit_json, fail
from gpu_remediation.ids import node_workflow_id
from gpu_remediation.ui_link import INCIDENT_COLUMNS, incident_url, incidents_query, incidents_url

ui_app = typer.Typer()

DEFAULT_UI_URL = "http://localhost:8233"
UI_URL_VARIABLE = "TEMPORAL_UI_URL"

UiUrlOption = Annotated[
    str | None,
    typer.Option(
        "--ui-url",
        help=f"The Temporal UI's address (default: ${UI_URL_VARIABLE}, or {DEFAULT_UI_URL}).",
        show_default=False,
    ),
]
UiClusterOption = Annotated[
    str | None,
    typer.Option(
        "--cluster",
        envvar="GPU_REMEDIATION_CLUSTER",
        help="Only this cluster's incidents (default: every cluster's).",
        show_default=False,
    ),
]


@ui_app.command("ui")
def ui(
    node: OptionalNodeArgument = None,
    cluster: UiClusterOption = None,
    ui_url: UiUrlOption = None,
    namespace: NamespaceOption = None,
    save_view: Annotated[
        str | None,
        typer.Option(
            "--save-view",
            metavar="NAME",
            help="Make the link also save the list as a view called NAME in the browser "
            "that opens it (once: every opening adds it again).",
        ),
    ] = None,
    open_browser: Annotated[
        bool, typer.Option("--open", help="Open the link in a web browser as well.")
    ] = False,
    json_output: JsonOption = False,
) -> None:
    """Print (or --open) the Temporal UI's list of node incidents, or NODE's incident page."""
    try:
        url, query = _link(node, cluster, ui_url, namespace, save_view)
    except CliError as err:
        fail(str(err), err.code)
    if json_output:
        emit_json({"url": url, "query": query, "columns": list(INCIDENT_COLUMNS)})
    else:
        out = console()
        out.print(url, soft_wrap=True, markup=False, highlight=False)
        if node is None:
            out.print(
                "Columns to add once in the UI (Configure columns, the list's gear icon): "
                + ", ".join(INCIDENT_COLUMNS),
                markup=False,
                highlight=False,
            )
    if open_browser and not webbrowser.open(url):
        fail("no web browser could be started here; open the link above", ExitCode.FAILED)


def _link(
    node: str | None,
    cluster: str | None,
    ui_url: str | None,
    namespace: str | None,
    save_view: str | None,
) -> tuple[str, str]:
    """The link and its visibility query.

    Raises:
        CliError: Exit code 2 for a bad UI address, cluster name or missing cluster.
    """
    base = ui_url or os.environ.get(UI_URL_VARIABLE) or DEFAULT_UI_URL
    if not base.startswith(("http://", "https://")):
        raise CliError(
            f"the UI address must start with http:// or https://, not {base!r}",
            ExitCode.INVALID_INPUT,
        )
    ns = TemporalOptions(namespace=namespace).profile().namespace or "default"
    try:
        query = incidents_query(cluster)
        if node is None:
            return incidents_url(base, ns, cluster, save_as=save_view), query
        if cluster is None:
            raise CliError(
                "a NODE needs --cluster (or GPU_REMEDIATION_CLUSTER)", ExitCode.INVALID_INPUT
            )
        return incident_url(base, node_workflow_id(cluster, node), ns), query
    except ValueError as err:
        raise CliError(str(err), ExitCode.INVALID_INPUT) from err
