"""Fixtures for the measuring core's tests: one fake SGLang server per session, reset per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .fake_server import FakeServer, running_fake_server


@pytest.fixture(scope="session")
def _fake_server_session() -> Iterator[FakeServer]:
    with running_fake_server() as server:
        yield server


@pytest.fixture
def fake_server(_fake_server_session: FakeServer) -> FakeServer:
    _fake_server_session.reset()
    return _fake_server_session
