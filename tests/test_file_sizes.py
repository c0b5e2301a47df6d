"""The house rule: no source file outside tests grows past 600 lines (one concern a file)."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LIMIT = 600
SOURCES = [
    "gpu_remediation",
    "workflows",
    "activities",
    "triggers",
    "cli",
    "agent",
    "simulator",
    "demo",
    "bench",
    "checkpoint_client",
    "whatif",
]


def test_no_source_file_is_over_600_lines() -> None:
    files = [REPO / "worker.py"]
    for folder in SOURCES:
        files += sorted((REPO / folder).rglob("*.py"))
    assert len(files) > 50, "the source folders were not found"
    long = {
        str(path.relative_to(REPO)): n
        for path in files
        if (n := len(path.read_text().splitlines())) > LIMIT
    }
    assert long == {}, f"split these files by concern: {long}"
