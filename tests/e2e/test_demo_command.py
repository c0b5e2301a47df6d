"""``remediate demo`` as a user runs it: a summary on the last line, and nothing left behind."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]

SCENARIO = """\
events:
  - {at: 30s, fault: fallen_off_bus, node: gpu-0001, gpu: 2}
  - {at: 30s, fault: application, node: gpu-0002, clears_after: 2m}
"""
SUMMARY_KEYS = {
    "incidents",
    "outcomes",
    "max_concurrent_replacements",
    "replacement_cap",
    "availability",
    "mttr_p50_s",
    "mttr_p95_s",
    "breaker_trips",
}


def _env() -> dict[str, str]:
    return {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("TEMPORAL_", "GPU_REMEDIATION_", "AWS_"))
    }


async def _start_demo(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cli.main",
        "demo",
        "--port",
        "0",
        "--ui-port",
        "0",
        # Ten nodes: with four, the application fault's node and the faulty
        # one are half the pool, and whether the breaker (20%, at least two
        # nodes) blocks the reboot depended on which the demo saw first.
        "--nodes",
        "10",
        "--pools",
        "gpu",
        "--no-workloads",
        *args,
        cwd=REPO,
        env=_env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


def _left_behind(run_dir: str, address: str) -> list[str]:
    """The run directory if it still exists, and live processes that name it or the server."""
    found = [run_dir] if Path(run_dir).exists() else []
    return found + _processes_mentioning(run_dir, address)


def _processes_mentioning(*needles: str) -> list[str]:
    """Command lines of live processes that contain any of ``needles``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(needle in cmdline for needle in needles):
            found.append(f"{proc.name}: {cmdline}")
    return found


def _started(stderr: str) -> tuple[str, str]:
    """The run directory and the Temporal address the demo announced."""
    run_dir = re.search(r"files in (\S+?)\)", stderr)
    address = re.search(r"Temporal server (\S+),", stderr)
    assert run_dir, stderr
    assert address, stderr
    return run_dir.group(1), address.group(1)


async def test_demo_json_prints_the_summary_on_the_last_line_and_leaves_nothing_behind(
    tmp_path: Path,
) -> None:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(SCENARIO)
    picture = tmp_path / "summary.svg"
    process = await _start_demo(
        "--scenario", str(scenario), "--time-factor", "600", "--duration", "10m", "--json",
        "--summary-svg", str(picture),
    )  # fmt: skip
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=100)
    err = stderr.decode()
    assert process.returncode == 0, err[-3000:]
    summary = json.loads(stdout.decode().strip().splitlines()[-1])
    assert summary.keys() >= SUMMARY_KEYS
    assert summary["incidents"] == 2
    assert summary["outcomes"] == {"repaired": 1, "application_fault": 1}
    assert summary["by_fault_class"]["gpu_fallen_off_bus"] == {"repaired": 1}
    assert summary["rungs_used"]["reboot"] == 1
    assert summary["replacement_cap"] == 2
    assert summary["max_concurrent_replacements"] == 0
    assert summary["breaker_trips"] == 0
    assert 0 < summary["availability"] < 1
    assert summary["mttr_p50_s"] > 0
    assert summary["temporal_ui"].startswith("http://127.0.0.1:")
    # The same summary as a picture of the terminal, with no web font to fetch.
    svg = picture.read_text()
    assert svg.startswith("<svg")
    assert "Incidents by fault class and outcome" in svg.replace("&#160;", " ")
    assert 'url("http' not in svg
    run_dir, address = _started(err)
    assert _left_behind(run_dir, address) == []


async def test_ctrl_c_stops_the_server_the_worker_and_the_fleet(tmp_path: Path) -> None:
    process = await _start_demo("--time-factor", "60", "--json")
    assert process.stderr is not None
    seen = ""
    while not seen.endswith("\n") or not seen.splitlines()[-1].startswith("["):
        # Up to the first progress line: then everything is up.
        line = await asyncio.wait_for(process.stderr.readline(), timeout=60)
        assert line, seen
        seen += line.decode()
    run_dir, address = _started(seen)
    assert _processes_mentioning(run_dir, address) != []  # the server and the worker
    ui = re.search(r"UI (http://\S+)", seen)
    assert ui, seen
    async with httpx.AsyncClient() as http:
        page = await http.get(ui.group(1), timeout=10)
    assert page.status_code == 200  # the web UI is on
    process.send_signal(signal.SIGINT)
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 130, (seen + stderr.decode())[-3000:]
    assert stdout == b""  # interrupted before the summary: no JSON
    assert _left_behind(run_dir, address) == []
