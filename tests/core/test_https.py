"""Measured streams and control requests over https: the same transport as http, verified
with the client's one TLS policy (Python's default context, which reads ``SSL_CERT_FILE``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_llmperf.base.results import Workload
from pytest_llmperf.core.client import LoadGenerator
from pytest_llmperf.core.records import RequestRecord
from pytest_llmperf.core.sweep import run_sweep
from tests.tls_certs import self_signed, server_context

from .fake_server import FakeServer, running_fake_server

SMALL = Workload(input_len=16, output_len=12)


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def _tls_server(cert: tuple[Path, Path]) -> Iterator[FakeServer]:
    with running_fake_server(server_context(*cert)) as server:
        yield server


@pytest.fixture
def tls_server(_tls_server: FakeServer) -> FakeServer:
    _tls_server.reset()
    return _tls_server


def test_sweep_over_https_counts_every_token(
    tls_server: FakeServer, cert: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(cert[0]))
    tls_server.config.tokens_per_event = (1, 3)
    assert tls_server.url.startswith("https://")
    result = run_sweep(tls_server.url, [1, 4], SMALL, config_name="tls")
    assert [lv.max_concurrency for lv in result.levels] == [1, 4]
    for lv in result.levels:
        assert lv.completed == lv.num_requests and lv.failed == 0
        assert lv.total_output_tokens == lv.num_requests * SMALL.output_len
        assert lv.client is not None and lv.client.transport.startswith("llhttp-stream/")
    assert tls_server.state.requests == 1 + 4 + 8  # warm-up, 4 at C=1, 2*C at C=4
    # control requests (flush before each level, /server_info) went over https too
    assert tls_server.state.flushes == 2
    assert result.server.max_running_requests == 48


def _one(url: str, backend: str = "sglang") -> RequestRecord:
    async def go() -> RequestRecord:
        async with LoadGenerator(url, backend, request_timeout_s=10) as gen:  # type: ignore[arg-type]
            return await gen.request(0, [1, 2, 3], 5)

    return asyncio.run(go())


def test_openai_backend_over_https(
    tls_server: FakeServer, cert: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(cert[0]))
    rec = _one(tls_server.url, "openai")  # resolves the model over the control client first
    assert rec.ok, rec.error
    assert rec.output_tokens == 5 == len(rec.token_times)


def test_an_unknown_certificate_is_refused(
    tls_server: FakeServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    other, _ = self_signed(tmp_path)  # trusted, but not the server's
    monkeypatch.setenv("SSL_CERT_FILE", str(other))
    rec = _one(tls_server.url)
    assert not rec.ok
    assert (rec.error or "").startswith("ConnectFailed: TLS handshake with 127.0.0.1:")
    assert "CERTIFICATE_VERIFY_FAILED" in (rec.error or "")
    assert tls_server.state.requests == 0
