"""``remediate-agent``: the node health check, run by Node Problem Detector as a custom plugin.

Commands:

* ``check [--check gpu|gpu-degraded|efa|efa-counters]``: one cycle. Exit 0
  healthy, 1 problem, 2 unknown (NPD's contract); stdout is the condition message.
* ``state show [--check NAME]``: the saved state (kernel-log position, held Xids).
* ``parse-message MESSAGE``: the evidence the watcher reads from a condition message.

Built on argparse rather than typer on purpose: NPD starts this process every
30 seconds on every GPU node, and importing typer and rich alone costs more
CPU than the whole healthy cycle is allowed (bench/agent.py measures it).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from agent.config import AgentConfig, ConfigError, load_config
from agent.cycle import CHECKS, CYCLES, CycleStats
from agent.findings import EXIT_UNKNOWN
from agent.state import StateLockedError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="remediate-agent", description="GPU/EFA node health check (NPD custom plugin)."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    check = commands.add_parser(
        "check", help="run one check cycle (exit 0 ok, 1 problem, 2 unknown)"
    )
    check.add_argument("--check", choices=CHECKS, default="gpu", help="which check (default gpu)")
    _config_flags(check)
    check.add_argument("--kernel-log", help="kmsg:/dev/kmsg, journal[:DIR] or file:PATH")
    check.add_argument("--max-output-length", type=int, help="NPD's max_output_length (bytes)")
    check.add_argument("--stats-file", help="write CPU and bytes-read figures here (JSON)")

    state = commands.add_parser("state", help="inspect the saved state")
    state_commands = state.add_subparsers(dest="state_command", required=True)
    show = state_commands.add_parser("show", help="print a check's state file")
    show.add_argument("--check", choices=CHECKS, default="gpu")
    _config_flags(show)

    parse = commands.add_parser(
        "parse-message", help="print the evidence a condition message holds"
    )
    parse.add_argument("message")
    return parser


def _config_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="JSON settings file (see agent/config.py)")
    parser.add_argument("--state-dir", help="where state files live")


def _load(args: argparse.Namespace) -> AgentConfig:
    return load_config(
        args.config,
        overrides={
            "state_dir": args.state_dir,
            "kernel_log": getattr(args, "kernel_log", None),
            "max_output_length": getattr(args, "max_output_length", None),
        },
    )


def _write_stats(path: str, started: float, stats: CycleStats) -> None:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    Path(path).write_text(
        json.dumps(
            {
                "cpu_self_s": own.ru_utime + own.ru_stime,
                "cpu_children_s": children.ru_utime + children.ru_stime,
                "wall_s": time.monotonic() - started,
                "kernel_log_bytes": stats.kernel_log_bytes,
                "tools": stats.tools,
            }
        )
    )


def _check(args: argparse.Namespace) -> int:
    started = time.monotonic()
    try:
        config = _load(args)
    except ConfigError as err:
        print(f"agent config invalid: {err}"[:1024])
        return EXIT_UNKNOWN
    stats = CycleStats()
    try:
        code, message = CYCLES[args.check](config, stats)
    except StateLockedError as err:
        code, message = EXIT_UNKNOWN, f"check not run: {err}"
    except Exception as err:  # NPD must get an answer: unknown, with the error named
        import traceback

        traceback.print_exc(file=sys.stderr)
        code, message = EXIT_UNKNOWN, f"agent error: {type(err).__name__}: {err}"
    limit = config.max_output_length
    print(message.encode("ascii", "replace")[:limit].decode())
    if args.stats_file:
        _write_stats(args.stats_file, started, stats)
    return code


def _state_show(args: argparse.Namespace) -> int:
    try:
        config = _load(args)
    except ConfigError as err:
        print(f"agent config invalid: {err}", file=sys.stderr)
        return 2
    path = config.state_path(args.check)
    if not path.exists():
        print(f"no state yet at {path}", file=sys.stderr)
        return 1
    # Read only: a damaged file is shown as such, not moved aside as a check would.
    try:
        state = json.loads(path.read_bytes())
    except (OSError, ValueError) as err:
        print(f"state file {path} unreadable: {err}", file=sys.stderr)
        return 1
    print(json.dumps(state, indent=2, sort_keys=True))
    return 0


def _parse_message(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from gpu_remediation.npd_message import parse_condition_message

    evidence = parse_condition_message(args.message, observed_at=datetime.now(UTC))
    print(json.dumps([e.model_dump(mode="json") for e in evidence], indent=2))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command in ``argv`` (``sys.argv[1:]`` when None) and return its exit code."""
    args = _parser().parse_args(argv)
    if args.command == "check":
        return _check(args)
    if args.command == "state":
        return _state_show(args)
    return _parse_message(args)


def app() -> NoReturn:
    """Console-script entry point (``remediate-agent``)."""
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # A tool stuck in the driver may still hold a thread: exit without waiting for it.
    os._exit(code)
