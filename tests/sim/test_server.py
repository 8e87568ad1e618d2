"""The HTTP front: every endpoint's shape and status, stream formats, auth, metrics, startup.

Most tests run the server in-process on a fake engine; a few run the real engine, and a few run
``python -m pytest_llmperf.sim`` as a subprocess to check the log and signal handling.
"""

from __future__ import annotations

import re
import signal
import socket
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from pytest_llmperf.sim.args import parse_args
from pytest_llmperf.sim.greedy import ids_text
from pytest_llmperf.sim.http_api import FLUSH_TEXT
from pytest_llmperf.sim.server import READY_LINE, SimServer
from pytest_llmperf.sim.wire import token_text

from .conftest import FakeEngine, ServerThread, SimProcess, profile_args, sse_json

MakeServer = Callable[..., ServerThread]
JSON = {"Content-Type": "application/json"}


def post(url: str, body: dict[str, Any], **kw: Any) -> httpx.Response:
    return httpx.post(url, json=body, timeout=10, **kw)


# ------------------------------------------------------------------ native /generate
def test_generate_stream_is_cumulative_with_meta_info(make_server: MakeServer) -> None:
    s = make_server()
    body = {"input_ids": [5] * 7, "sampling_params": {"max_new_tokens": 6}, "stream": True}
    r = post(s.url + "/generate", body)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    assert b": " not in r.content.replace(b"data: ", b"")  # compact JSON, like orjson
    events, done = sse_json(r.content)
    assert done and len(events) == 6
    prev_text = ""
    for i, ev in enumerate(events, start=1):
        meta = ev["meta_info"]
        assert meta["completion_tokens"] == i
        assert meta["prompt_tokens"] == 7 and meta["cached_tokens"] == 0
        assert ev["text"].startswith(prev_text) and len(ev["text"]) > len(prev_text)
        assert ev["text"] == token_text(0, i)
        assert len(ev["output_ids"]) == i
        prev_text = ev["text"]
        if i < 6:
            assert meta["finish_reason"] is None and "e2e_latency" not in meta
    last = events[-1]["meta_info"]
    assert last["finish_reason"] == {"type": "length", "length": 6}
    assert last["e2e_latency"] > 0 and "spec_verify_ct" not in last
    assert len({e["meta_info"]["id"] for e in events}) == 1


def test_generate_non_stream_defaults_and_text_prompt(make_server: MakeServer) -> None:
    s = make_server()
    r = post(s.url + "/generate", {"text": "one two  three\nfour", "rid": "my-rid"})
    assert r.status_code == 200
    out = r.json()
    assert out["meta_info"]["completion_tokens"] == 128  # SGLang's max_new_tokens default
    assert out["meta_info"]["prompt_tokens"] == 4
    assert out["meta_info"]["id"] == "my-rid"
    # A whole answer is greedy: drawn from the prompt, the same for the same prompt.
    assert out["text"] == ids_text(out["output_ids"]) and len(out["output_ids"]) == 128
    again = post(s.url + "/generate", {"text": "one two  three\nfour"}).json()
    other = post(s.url + "/generate", {"text": "one two three five"}).json()
    assert again["output_ids"] == out["output_ids"] != other["output_ids"]


def test_generate_batch_stream_has_index(make_server: MakeServer) -> None:
    s = make_server()
    body = {"input_ids": [[1, 2], [3, 4, 5]], "sampling_params": {"max_new_tokens": 3}}
    r = post(s.url + "/generate", {**body, "stream": True})
    events, done = sse_json(r.content)
    assert done
    by_index: dict[int, list[int]] = {0: [], 1: []}
    for ev in events:
        by_index[ev["index"]].append(ev["meta_info"]["completion_tokens"])
    assert by_index == {0: [1, 2, 3], 1: [1, 2, 3]}
    out = post(s.url + "/generate", body).json()
    assert [o["meta_info"]["prompt_tokens"] for o in out] == [2, 3]


@pytest.mark.parametrize(
    "body",
    [
        {"text": "a", "input_ids": [1]},
        {},
        {"input_ids": []},
        {"text": "a", "sampling_params": {"max_new_tokens": "x"}},
    ],
)
def test_generate_bad_request_is_400(make_server: MakeServer, body: dict[str, Any]) -> None:
    s = make_server()
    r = post(s.url + "/generate", body)
    assert r.status_code == 400
    assert isinstance(r.json()["error"]["message"], str)


def test_engine_refusal_is_400_before_streaming(make_server: MakeServer) -> None:
    eng = FakeEngine()
    eng.max_context = 5
    s = make_server(engine=eng)
    r = post(s.url + "/generate", {"input_ids": [1] * 9, "stream": True})
    assert r.status_code == 400 and r.json()["error"]["message"] == "too long"
    r = post(
        s.url + "/v1/completions",
        {"prompt": [1] * 9, "stream": True},
    )
    assert r.status_code == 400 and r.json()["object"] == "error"


def test_spec_decoding_multi_token_events(make_server: MakeServer) -> None:
    s = make_server(engine=FakeEngine(tokens_per_step=3), speculative_algorithm="EAGLE")
    r = post(
        s.url + "/generate",
        {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 10}, "stream": True},
    )
    events, _ = sse_json(r.content)
    counts = [e["meta_info"]["completion_tokens"] for e in events]
    deltas = [b - a for a, b in zip([0, *counts], counts, strict=False)]
    assert counts[-1] == 10 and max(deltas) == 3
    assert len(events[-1]["output_ids"]) == 10
    last = events[-1]["meta_info"]
    assert last["spec_verify_ct"] == len(events)
    assert last["spec_accept_length"] == pytest.approx(10 / len(events))
    info = httpx.get(s.url + "/server_info").json()
    assert info["internal_states"][0]["avg_spec_accept_length"] == 3.0
    assert info["speculative_algorithm"] == "EAGLE"


def test_client_disconnect_aborts_engine_request(make_server: MakeServer) -> None:
    eng = FakeEngine(step_s=0.005)
    s = make_server(engine=eng)
    body = {"input_ids": [1], "sampling_params": {"max_new_tokens": 100000}, "stream": True}
    with httpx.stream("POST", s.url + "/generate", json=body, timeout=10) as r:
        chunks = r.iter_raw()
        next(chunks)
        rid = s.call(lambda: eng.submitted[-1].rid)
    deadline = time.monotonic() + 5
    while rid not in s.call(lambda: list(eng.aborted)):
        assert time.monotonic() < deadline, "engine.abort was not called"
        time.sleep(0.01)
    assert s.call(eng.is_idle)


# ------------------------------------------------------------------ OpenAI-compatible
def test_completions_stream_deltas_and_usage(make_server: MakeServer) -> None:
    s = make_server()
    body = {
        "model": "x",
        "prompt": [1, 2, 3, 4],
        "max_tokens": 4,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    events, done = sse_json(post(s.url + "/v1/completions", body).content)
    assert done
    content, usage_chunk = events[:-1], events[-1]
    assert [c["choices"][0]["text"] for c in content] == [token_text(i, i + 1) for i in range(4)]
    assert [c["choices"][0]["finish_reason"] for c in content] == [None, None, None, "length"]
    assert all(c["object"] == "text_completion" and c["usage"] is None for c in content)
    assert all(c["id"].startswith("cmpl-") and c["model"] == "x" for c in events)
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"] == {
        "prompt_tokens": 4,
        "total_tokens": 8,
        "completion_tokens": 4,
        "reasoning_tokens": 0,
    }


def test_completions_continuous_usage_and_non_stream(make_server: MakeServer) -> None:
    s = make_server()
    body = {
        "prompt": "a b c",
        "max_tokens": 3,
        "stream": True,
        "stream_options": {"continuous_usage_stats": True},
    }
    events, _ = sse_json(post(s.url + "/v1/completions", body).content)
    assert [e["usage"]["completion_tokens"] for e in events] == [1, 2, 3]
    out = post(s.url + "/v1/completions", {"prompt": "a b c"}).json()
    assert out["usage"]["completion_tokens"] == 16  # OpenAI max_tokens default
    native = post(s.url + "/generate", {"text": "a b c", "sampling_params": {"max_new_tokens": 16}})
    assert out["choices"][0]["text"] == native.json()["text"]  # the same greedy answer
    assert out["choices"][0]["finish_reason"] == "length"
    assert out["object"] == "text_completion" and out["model"] == "default"


def test_chat_stream_role_deltas_finish_usage(make_server: MakeServer) -> None:
    s = make_server()
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hello there you"}],
        "max_completion_tokens": 3,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    events, done = sse_json(post(s.url + "/v1/chat/completions", body).content)
    assert done and len(events) == 1 + 3 + 1 + 1
    role, *content, finish, usage = events
    assert role["choices"][0]["delta"]["role"] == "assistant"
    assert role["choices"][0]["delta"]["content"] == ""
    assert [c["choices"][0]["delta"]["content"] for c in content] == [
        token_text(i, i + 1) for i in range(3)
    ]
    assert all(c["choices"][0]["finish_reason"] is None for c in content)
    assert finish["choices"][0]["finish_reason"] == "length"
    assert finish["choices"][0]["delta"]["content"] is None
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 3
    # 3 content words + the default Llama-3-style template: 5 per message + 5
    assert usage["usage"]["prompt_tokens"] == 3 + 5 + 5
    assert all(e["object"] == "chat.completion.chunk" for e in events)


def test_chat_non_stream(make_server: MakeServer) -> None:
    s = make_server()
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    out = post(s.url + "/v1/chat/completions", body).json()
    assert out["object"] == "chat.completion"
    assert out["choices"][0]["message"] == {
        "role": "assistant",
        "content": out["choices"][0]["message"]["content"],
        "reasoning_content": None,
        "tool_calls": None,
    }
    assert len(out["choices"][0]["message"]["content"].split()) == 5
    # 1 content word + 5 template tokens for the message + 5 constant, + 5 generated
    assert out["usage"]["completion_tokens"] == 5 and out["usage"]["total_tokens"] == 16


def test_openai_requires_json_content_type(make_server: MakeServer) -> None:
    s = make_server()
    r = httpx.post(s.url + "/v1/completions", content=b'{"prompt":"a"}', timeout=5)
    assert r.status_code == 400 and "Unsupported Media Type" in r.json()["message"]


# ------------------------------------------------------------------ info endpoints
def test_health_is_503_until_warmup_then_200(make_server: MakeServer) -> None:
    eng = FakeEngine()
    eng.paused = True  # the warmup generate cannot finish
    s = make_server(engine=eng, wait_ready=False)
    assert httpx.get(s.url + "/health").status_code == 503
    assert httpx.get(s.url + "/health_generate").status_code == 503
    s.call(lambda: setattr(eng, "paused", False))
    deadline = time.monotonic() + 5
    while httpx.get(s.url + "/health_generate").status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert httpx.get(s.url + "/health").status_code == 200
    assert eng.submitted[0].max_new_tokens == 8  # SGLang's warmup request


def test_skip_warmup_still_becomes_ready(make_server: MakeServer) -> None:
    eng = FakeEngine()
    s = make_server(engine=eng, skip_server_warmup=True)
    assert httpx.get(s.url + "/health").status_code == 200
    assert eng.submitted == []


def test_model_info_and_models(make_server: MakeServer) -> None:
    s = make_server(model_path="org/model", served_model_name="served")
    for path in ("/model_info", "/get_model_info"):
        info = httpx.get(s.url + path).json()
        assert info["model_path"] == "org/model" and info["is_generation"] is True
        assert "weight_version" in info and "preferred_sampling_params" in info
    models = httpx.get(s.url + "/v1/models").json()
    assert models["object"] == "list"
    card = models["data"][0]
    assert card["id"] == "served" and card["owned_by"] == "sglang" and card["object"] == "model"


def test_server_info_shape(make_server: MakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    s = make_server(dp_size=2, tp_size=2)
    for path in ("/server_info", "/get_server_info"):
        info = httpx.get(s.url + path).json()
        assert info["tp_size"] == 2 and info["dp_size"] == 2 and info["port"] == s.server.port
        assert info["status"] == "ready" and info["max_total_num_tokens"] == 100_000
        assert info["simulated"] is True and re.match(r"^\d+\.\d+\.\d+", info["version"])
        assert info["base_gpu_id"] == 0 and info["sim_cuda_visible_devices"] == "2,3"
        assert info["max_running_requests"] is None
        states = info["internal_states"]
        assert len(states) == 2
        for st in states:
            assert st["effective_max_running_requests_per_dp"] == 32
            assert st["last_gen_throughput"] == 123.0
            assert st["memory_usage"]["token_capacity"] == 100_000
            assert "avg_spec_accept_length" not in st


def test_no_version_route_and_json_404(make_server: MakeServer) -> None:
    s = make_server()
    r = httpx.get(s.url + "/version")
    assert r.status_code == 404 and r.json() == {"detail": "Not Found"}
    assert httpx.get(s.url + "/generate").status_code == 405


def test_flush_cache_idle_and_busy(make_server: MakeServer) -> None:
    eng = FakeEngine(step_s=0.005)
    s = make_server(engine=eng)
    for method in ("GET", "POST"):
        r = httpx.request(method, s.url + "/flush_cache")
        assert r.status_code == 200 and r.text == FLUSH_TEXT
    assert s.call(lambda: eng.resets) == 2
    body = {"input_ids": [1], "sampling_params": {"max_new_tokens": 100000}, "stream": True}
    with httpx.stream("POST", s.url + "/generate", json=body, timeout=10) as r:
        chunks = r.iter_raw()  # keep a reference: a dropped iterator closes the response
        next(chunks)
        busy = httpx.post(s.url + "/flush_cache")
        assert busy.status_code == 400 and busy.text == FLUSH_TEXT
    assert s.call(lambda: eng.resets) == 2


def test_metrics_off_is_404_and_on_has_sglang_names(make_server: MakeServer) -> None:
    off = make_server()
    assert httpx.get(off.url + "/metrics").status_code == 404
    on = make_server(enable_metrics=True, speculative_algorithm="EAGLE")
    post(on.url + "/generate", {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 4}})
    text = httpx.get(on.url + "/metrics").text
    for name in (
        "sglang:num_running_reqs{",
        "sglang:num_queue_reqs{",
        "sglang:token_usage{",
        "sglang:gen_throughput{",
        "sglang:spec_accept_length{",
        "sglang:max_total_num_tokens{",
    ):
        assert name in text
    assert re.search(r'^sglang:num_requests_total\{model_name="[^"]+"\} 1\.0$', text, re.M)
    assert re.search(r"^sglang:generation_tokens_total\{.*\} 4\.0$", text, re.M)
    assert re.search(r"^sglang:prompt_tokens_total\{.*\} 3\.0$", text, re.M)
    assert "sglang:time_to_first_token_seconds_bucket" in text


def test_api_key_auth(make_server: MakeServer) -> None:
    s = make_server(api_key="sekret", enable_metrics=True)
    gen = {"input_ids": [1], "sampling_params": {"max_new_tokens": 1}}
    for method, path in (("POST", "/generate"), ("GET", "/server_info"), ("GET", "/v1/models")):
        r = httpx.request(method, s.url + path, json=gen)
        assert r.status_code == 401 and r.json() == {"error": "Unauthorized"}
        bad = httpx.request(method, s.url + path, json=gen, headers={"Authorization": "Bearer x"})
        assert bad.status_code == 401
        ok = httpx.request(
            method, s.url + path, json=gen, headers={"Authorization": "bearer sekret"}
        )
        assert ok.status_code == 200
    assert post(s.url + "/generate", gen, headers={"x-api-key": "sekret"}).status_code == 200
    for path in ("/health", "/health_generate", "/metrics"):
        assert httpx.get(s.url + path).status_code == 200
    assert httpx.options(s.url + "/generate").status_code != 401


def test_ground_truth_and_stats(make_server: MakeServer) -> None:
    s = make_server()
    post(s.url + "/generate", {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 3}})
    gt = httpx.get(s.url + "/_sim/ground_truth").json()
    assert gt["server"]["tokens_served"] == 3 and gt["server"]["requests_finished"] == 1
    assert len(gt["requests"]) == 2  # warmup + ours, from the engine
    stats = httpx.get(s.url + "/_sim/stats").json()
    assert stats["engine"]["total_requests"] == 2 and stats["engine"]["behind_schedule"] is False


# ------------------------------------------------------------------ real engine
def test_real_engine_streams_and_reports(make_server: MakeServer) -> None:
    from pytest_llmperf.sim.engine import create_engine

    knobs = parse_args(profile_args()).knobs
    engine, lines = create_engine(knobs)
    assert any(line.startswith("max_total_num_tokens=") for line in lines)
    s = make_server(engine=engine, sim_profile=knobs.sim_profile)
    body = {"input_ids": [1] * 32, "sampling_params": {"max_new_tokens": 20}, "stream": True}
    events, done = sse_json(post(s.url + "/generate", body).content)
    assert done and events[-1]["meta_info"]["completion_tokens"] == 20
    info = httpx.get(s.url + "/server_info").json()
    assert info["internal_states"][0]["effective_max_running_requests_per_dp"] >= 1
    assert info["sim_profile"]
    gt = httpx.get(s.url + "/_sim/ground_truth").json()
    assert gt["server"]["tokens_served"] == 20


def test_real_engine_spec_cap_and_multi_token(make_server: MakeServer) -> None:
    from pytest_llmperf.sim.engine import create_engine

    args = parse_args([*profile_args(), "--speculative-algorithm", "EAGLE"])
    try:
        engine, lines = create_engine(args.knobs)
    except Exception as e:  # the profile may describe no draft model
        pytest.skip(f"profile has no speculative decoding: {e}")
    s = make_server(engine=engine, **{"speculative_algorithm": "EAGLE"})
    body = {"input_ids": [1] * 8, "sampling_params": {"max_new_tokens": 64}, "stream": True}
    events, _ = sse_json(post(s.url + "/generate", body).content)
    counts = [e["meta_info"]["completion_tokens"] for e in events]
    assert counts[-1] == 64 and len(events) < 64  # some events carry > 1 token
    info = httpx.get(s.url + "/server_info").json()
    assert info["max_running_requests"] == 48
    assert "avg_spec_accept_length" in info["internal_states"][0]


# ------------------------------------------------------------------ real process
LOG_LINE = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] ")


def test_process_startup_log_and_sigterm(sim_process: Callable[..., SimProcess]) -> None:
    p = sim_process(*profile_args(), "--api-key", "topsecret-key", "--tp", "1", "--weird-flag")
    p.wait_healthy()
    headers = {"Authorization": "Bearer topsecret-key"}
    r = httpx.post(
        p.url + "/generate",
        json={"text": "hi", "sampling_params": {"max_new_tokens": 2}},
        headers=headers,
        timeout=10,
    )
    assert r.status_code == 200
    t0 = time.monotonic()
    p.proc.send_signal(signal.SIGTERM)
    assert p.proc.wait(10) == 0
    assert time.monotonic() - t0 < 5
    log = p.log()
    lines = [line for line in log.splitlines() if line.strip()]
    assert all(LOG_LINE.match(line) for line in lines), log
    assert f"Uvicorn running on http://127.0.0.1:{p.port} (Press CTRL+C to quit)" in log
    assert READY_LINE in log and "--weird-flag" in log
    assert log.index("Uvicorn running") < log.index(READY_LINE)
    assert "topsecret-key" not in log


def test_process_port_taken_exits_nonzero(sim_process: Callable[..., SimProcess]) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        p = sim_process(*profile_args(), "--port", str(port))
        assert p.proc.wait(20) != 0
        assert "address already in use" in p.log().lower() or "Errno" in p.log()


def test_sim_server_requires_no_engine_argument_types() -> None:
    # SimServer builds its own engine from knobs when none is given (the CLI path).
    knobs = parse_args(profile_args()).knobs
    server = SimServer(knobs)
    assert server.engine.stats().max_total_num_tokens > 0


# ------------------------------------------------------------------ many streams
def test_serves_256_concurrent_streams_to_the_last_token(
    sim_process: Callable[..., SimProcess], tmp_path: Any
) -> None:
    """256 concurrent /generate streams on a fast profile: every one completes with exactly
    its tokens. How fast is benchmarks/bench_sim_streams.py's question (machine-dependent)."""
    import asyncio
    import json

    import aiohttp

    from pytest_llmperf.sim.profile import PROFILES_DIR, available_profiles

    prof = json.loads((PROFILES_DIR / f"{available_profiles()[0]}.json").read_text())
    prof.update(
        name="bench-fast",
        hardware={"gpu_name": "Sim GPU", "gpu_memory_gb": 80.0, "tp_size": 1},
        model={
            "model_path": "sim/fast",
            "architecture": "LlamaForCausalLM",
            "weights_gb": 16.0,
            "kv_bytes_per_token": 4096,
            "context_length": 32768,
        },
        step={"base_ms": 6.0, "per_seq_ms": 0.02, "per_seq_exponent": 1.0, "per_kv_token_us": 0},
        prefill={"per_token_us": 1.0},
    )
    prof.pop("spec", None)
    path = tmp_path / "fast.json"
    path.write_text(json.dumps(prof))
    p = sim_process("--sim-profile", str(path), "--max-running-requests", "512")
    p.wait_healthy()
    streams, n_out = 256, 48

    async def one(session: aiohttp.ClientSession, i: int) -> tuple[int, Any]:
        body = {
            "input_ids": [1 + i % 7] * 128,
            "sampling_params": {"max_new_tokens": n_out, "ignore_eos": True},
            "stream": True,
        }
        async with session.post(p.url + "/generate", json=body) as r:
            raw = await r.read()
        return r.status, sse_json(raw)

    async def run() -> list[tuple[int, Any]]:
        timeout = aiohttp.ClientTimeout(total=120)
        conn = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:
            return await asyncio.gather(*(one(session, i) for i in range(streams)))

    served = httpx.get(p.url + "/_sim/stats").json()["engine"]["total_output_tokens"]
    results = asyncio.run(run())
    assert len(results) == streams
    for status, (events, done) in results:
        assert status == 200 and done
        counts = [e["meta_info"]["completion_tokens"] for e in events]
        assert counts == list(range(1, n_out + 1))  # one token per event, none lost or repeated
        assert events[-1]["meta_info"]["finish_reason"]["type"] == "length"
    stats = httpx.get(p.url + "/_sim/stats").json()["engine"]
    assert stats["total_output_tokens"] - served == streams * n_out  # the health checks' before
