"""The ``remediate`` command line: one typer app, one sub-app per area.

Sub-commands live in their own modules and are attached here, so adding one
(worker, run, status, ...) is one import and one ``add_typer`` line.
"""

from __future__ import annotations

import typer

from cli.admission import admission_app
from cli.budget import budget_app
from cli.compare import compare_app
from cli.controls import controls_app
from cli.demo import demo_app
from cli.incidents import incidents_app
from cli.policy import policy_app
from cli.receiver import receiver
from cli.sim import sim_app
from cli.ui import ui_app
from cli.watch import watch
from cli.worker import worker_app
from gpu_remediation.process_exit import exit_now, exit_status

app = typer.Typer(
    name="remediate",
    help="Remediate faulty GPU nodes on Kubernetes with durable Temporal workflows.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,  # locals may hold credentials or whole policies
)
app.add_typer(policy_app, name="policy")
app.command("receiver")(receiver)
app.command("watch")(watch)
app.add_typer(incidents_app)  # run, status
app.add_typer(controls_app)  # pause, resume, approve, skip, retry, abort
app.add_typer(budget_app)  # budget
app.add_typer(admission_app)  # admit
app.add_typer(worker_app)  # worker
app.add_typer(sim_app)  # sim
app.add_typer(demo_app)  # demo
app.add_typer(compare_app)  # compare
app.add_typer(ui_app)  # ui


def main() -> None:
    """The ``remediate`` entry point: run the command, then exit without finalizing.

    See :mod:`gpu_remediation.process_exit`: the SDK core's threads can crash
    the interpreter's finalization, turning a clean exit into an abort.
    """
    try:
        app()
    except SystemExit as done:
        exit_now(exit_status(done.code))
    exit_now(0)


if __name__ == "__main__":
    main()
