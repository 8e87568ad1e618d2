"""The vLLM front (``--sim-api vllm``), the chat-template prompt overhead and the prefix cache."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from pytest_llmperf.sim.args import parse_args

from .conftest import profile_args, sse_json

MakeServer = Callable[..., Any]


def post(url: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(url, json=body, timeout=20)


# ------------------------------------------------------------------ vLLM front
def test_vllm_routes_and_sglang_routes_404(make_server: MakeServer) -> None:
    s = make_server(sim_api="vllm", served_model_name="llama")
    health = httpx.get(s.url + "/health")
    assert health.status_code == 200 and health.content == b""
    models = httpx.get(s.url + "/v1/models").json()
    assert models["object"] == "list" and models["data"][0]["id"] == "llama"
    assert models["data"][0]["owned_by"] == "vllm"
    assert "version" in httpx.get(s.url + "/version").json()
    assert httpx.post(s.url + "/reset_prefix_cache").status_code == 200
    metrics = httpx.get(s.url + "/metrics").text
    assert "vllm:num_requests_running" in metrics and "sglang:" not in metrics
    for path in ("/generate", "/flush_cache"):
        r = httpx.post(s.url + path, json={})
        assert r.status_code == 404 and r.json() == {"detail": "Not Found"}
    for path in ("/server_info", "/health_generate", "/model_info"):
        assert httpx.get(s.url + path).status_code == 404


def test_vllm_unknown_model_gets_404_error(make_server: MakeServer) -> None:
    s = make_server(sim_api="vllm", served_model_name="llama")
    r = post(s.url + "/v1/completions", {"model": "other", "prompt": "hi", "max_tokens": 2})
    assert r.status_code == 404
    assert r.json() == {
        "error": {
            "message": "The model `other` does not exist.",
            "type": "NotFoundError",
            "param": "model",
            "code": 404,
        }
    }
    ok = post(s.url + "/v1/completions", {"model": "llama", "prompt": "hi", "max_tokens": 2})
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 2


def test_vllm_chat_stream_usage_shapes(make_server: MakeServer) -> None:
    s = make_server(sim_api="vllm", served_model_name="llama")
    body = {
        "model": "llama",
        "messages": [{"role": "user", "content": "a b c"}],
        "max_tokens": 3,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    events, done = sse_json(post(s.url + "/v1/chat/completions", body).content)
    assert done
    role, *tokens, usage = events
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert role["usage"] == {"prompt_tokens": 13, "total_tokens": 13, "completion_tokens": 0}
    assert [t["usage"]["completion_tokens"] for t in tokens] == [1, 2, 3]
    assert set(tokens[0]["choices"][0]["delta"]) == {"content"}
    assert tokens[-1]["choices"][0]["finish_reason"] == "length"
    assert "stop_reason" in tokens[-1]["choices"][0]
    assert usage["choices"] == []
    assert usage["usage"] == {"prompt_tokens": 13, "total_tokens": 16, "completion_tokens": 3}


def test_vllm_completion_stream_without_continuous_usage(make_server: MakeServer) -> None:
    s = make_server(sim_api="vllm")
    body = {"prompt": [1, 2, 3], "max_tokens": 2, "stream": True}
    events, done = sse_json(post(s.url + "/v1/completions", body).content)
    assert done and len(events) == 2
    assert all(e["usage"] is None and e["object"] == "text_completion" for e in events)


# ------------------------------------------------------------------ chat template
def test_chat_template_overhead_counts_in_prompt_tokens(make_server: MakeServer) -> None:
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}]
    body = {"messages": msgs, "max_tokens": 1}
    default = make_server()
    assert post(default.url + "/v1/chat/completions", body).json()["usage"]["prompt_tokens"] == (
        4 + 2 * 5 + 5
    )
    bare = make_server(sim_chat_template_overhead=(0, 0))
    assert post(bare.url + "/v1/chat/completions", body).json()["usage"]["prompt_tokens"] == 4


def test_chat_template_overhead_flag() -> None:
    assert parse_args([]).knobs.sim_chat_template_overhead == (5, 5)
    assert parse_args(
        ["--sim-chat-template-overhead", "7,30"]
    ).knobs.sim_chat_template_overhead == (
        7,
        30,
    )


# ------------------------------------------------------------------ prefix cache
def _real_server(make_server: MakeServer, *extra: str, **knobs: Any) -> Any:
    from pytest_llmperf.sim.engine import create_engine

    args = parse_args([*profile_args(), *extra])
    engine, _ = create_engine(args.knobs)
    return make_server(engine=engine, sim_profile=args.knobs.sim_profile, **knobs)


def _generate(url: str, ids: list[int]) -> dict[str, Any]:
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 2}}
    return dict(post(url + "/generate", body).json()["meta_info"])


def _ttft(url: str, rid: str) -> tuple[float, int]:
    gt = httpx.get(url + "/_sim/ground_truth").json()
    f = gt["fields"]
    row = next(r for r in gt["requests"] if r[f.index("rid")] == rid)
    return (
        row[f.index("t_first_token")] - row[f.index("t_arrival")],
        row[f.index("cached_tokens")],
    )


def test_repeated_prompt_is_cached_faster_and_flush_empties(make_server: MakeServer) -> None:
    s = _real_server(make_server)
    ids = list(range(3000))
    first = _generate(s.url, ids)
    second = _generate(s.url, ids)
    assert first["cached_tokens"] == 0
    assert second["cached_tokens"] >= 3000 - 16  # whole 16-token blocks, never the last token
    t1, c1 = _ttft(s.url, first["id"])
    t2, c2 = _ttft(s.url, second["id"])
    assert (c1, c2) == (0, second["cached_tokens"])
    assert t2 < t1 * 0.5, (t1, t2)
    assert httpx.post(s.url + "/flush_cache").status_code == 200
    assert _generate(s.url, ids)["cached_tokens"] == 0


def test_shared_prefix_and_disable_radix_cache(make_server: MakeServer) -> None:
    s = make_server()
    _generate(s.url, list(range(100)))
    partial = _generate(s.url, [*range(64), *range(1000, 1036)])
    assert partial["cached_tokens"] == 64
    off = make_server(disable_radix_cache=True)
    _generate(off.url, list(range(100)))
    assert _generate(off.url, list(range(100)))["cached_tokens"] == 0


def test_cache_report_in_openai_usage_needs_flag(make_server: MakeServer) -> None:
    body = {"prompt": list(range(64)), "max_tokens": 1}
    plain = make_server()
    post(plain.url + "/v1/completions", body)
    assert (
        post(plain.url + "/v1/completions", body).json()["usage"]["prompt_tokens_details"] is None
    )
    report = make_server(enable_cache_report=True, enable_metrics=True)
    post(report.url + "/v1/completions", body)
    usage = post(report.url + "/v1/completions", body).json()["usage"]
    assert usage["prompt_tokens_details"] == {"cached_tokens": 63}  # all but the last token
    assert "sglang:cached_tokens_total" in httpx.get(report.url + "/metrics").text
