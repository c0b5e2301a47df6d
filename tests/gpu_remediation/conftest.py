"""Registers the ``linear_guard`` marker of the parser guards (test_parsers_linear.py)."""

from __future__ import annotations

import pytest

from tests.gpu_remediation.hostile_inputs import LINEAR_GUARD_MARKER


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", LINEAR_GUARD_MARKER)
