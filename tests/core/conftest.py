"""Fixtures for the measuring core's tests: one simulated and one fake SGLang server per session
(the fake reset per test)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.sim_servers import ServerThread, running_sim

from .fake_server import FakeServer, running_fake_server


@pytest.fixture(scope="session")
def _fake_server_session() -> Iterator[FakeServer]:
    with running_fake_server() as server:
        yield server


@pytest.fixture
def fake_server(_fake_server_session: FakeServer) -> FakeServer:
    _fake_server_session.reset()
    return _fake_server_session


@pytest.fixture(scope="session")
def sim_server() -> Iterator[ServerThread]:
    """The simulator, for tests that need a well-behaved SGLang server (the fake is for the
    stream shapes and failures the simulator does not produce)."""
    with running_sim() as server:
        yield server
