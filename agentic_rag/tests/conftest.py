"""Fixtures of the tests that run real daphne processes (test_shutdown, test_startup)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .server_support import Server, prepared_databases


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory) -> Path:
    """The prepared databases, made once for the module (migrating is most of the cost)."""
    return prepared_databases(tmp_path_factory.mktemp("snapshots"))


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    """Servers the test starts (server_support.start); any left running are killed at its end."""
    started: list[Server] = []
    yield started
    for server in started:
        server.kill()
