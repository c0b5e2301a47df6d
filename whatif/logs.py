"""Where a comparison's processes log (kept light: the relay's process imports it)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def log_to(path: Path) -> Iterator[None]:
    """Send this process's logs (INFO and up; moto's per-request lines off) to ``path``."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto logs every request
    try:
        yield
    finally:
        root.removeHandler(handler)
        handler.close()
