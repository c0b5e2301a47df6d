"""The baseline policies ``remediate compare`` runs by name (``policies/*.yaml``).

Each file is an ordinary policy file (merged over the shipped defaults, like
any ``--policy``); its header says which real system it stands for and where
its numbers come from.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from gpu_remediation.policy import Policy
from gpu_remediation.policy_loader import load_policy

BASELINES: tuple[str, ...] = ("no-automation", "replace-always", "reboot-then-replace", "graded")
"""The baselines a comparison runs by default, in the order it shows them."""

VARIANTS: tuple[str, ...] = ("graded-no-admission",)
"""Built-in variants of a baseline, run only when named (one setting's trade-off)."""

BUILT_IN: tuple[str, ...] = BASELINES + VARIANTS
"""Every policy ``--policies`` knows by name."""


def baseline_text(name: str) -> str:
    """The YAML text of baseline ``name``.

    Raises:
        KeyError: ``name`` is not a built-in policy.
    """
    if name not in BUILT_IN:
        raise KeyError(name)
    return resources.files("policies").joinpath(f"{name}.yaml").read_text(encoding="utf-8")


def load_baseline(name: str) -> Policy:
    """Baseline ``name`` merged over the defaults, validated.

    Raises:
        KeyError: ``name`` is not a built-in policy.
        PolicyError: The packaged file is invalid (a bug: tests load every one).
    """
    if name not in BUILT_IN:
        raise KeyError(name)
    resource = resources.files("policies").joinpath(f"{name}.yaml")
    with resources.as_file(resource) as path:
        return load_policy(Path(path))
