"""The ``remediate`` command line: one typer app, one sub-app per area.

Sub-commands live in their own modules and are attached here, so adding one
(worker, run, status, ...) is one import and one ``add_typer`` line.
"""

from __future__ import annotations

import typer

from cli.policy import policy_app

app = typer.Typer(
    name="remediate",
    help="Remediate faulty GPU nodes on Kubernetes with durable Temporal workflows.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,  # locals may hold credentials or whole policies
)
app.add_typer(policy_app, name="policy")

if __name__ == "__main__":
    app()
