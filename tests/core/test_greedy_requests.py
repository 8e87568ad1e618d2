"""Untimed greedy requests against a server that answers nothing: a first wave fails within
its timeout and the rest are not sent, so a hung server costs one timeout, not one per prompt."""

from __future__ import annotations

import asyncio

from pytest_llmperf.core.greedy_requests import ask_async


async def _ask_a_silent_server(prompts: int, concurrency: int) -> tuple[int, list[str]]:
    """Requests that reached a server that reads them and never answers, and the errors."""
    received = 0

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal received
        await reader.readuntil(b"\r\n\r\n")
        received += 1
        try:
            await reader.read()  # until the client gives up and closes
        finally:
            writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        out = await ask_async(
            f"http://127.0.0.1:{port}",
            [f"prompt {i}" for i in range(prompts)],
            concurrency=concurrency,
            request_timeout_s=0.3,
            deadline_s=60,
        )
    assert out.failed == prompts
    return received, out.errors


def test_a_silent_server_is_asked_one_wave_only() -> None:
    received, errors = asyncio.run(_ask_a_silent_server(32, 4))
    # the first wave of 4, and at most one more for each of its failures but the last
    assert 4 <= received <= 7
    assert len(errors) == 32
    assert sum("not sent, 4 requests before it got no answer" in e for e in errors) == 32 - received
    assert all("ReadTimeout" in e for e in errors if "not sent" not in e), errors
