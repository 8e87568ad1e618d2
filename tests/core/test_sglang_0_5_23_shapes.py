"""The parsers on answers captured from a real SGLang 0.5.23 server (CPU, a tiny random model).

``tests/data/sglang-0.5.23/`` holds what the server sent, byte for byte except the model path
(``/models/tiny-llama``): ``/server_info``, ``/get_model_info``, ``/v1/models``, ``/metrics``,
``/generate`` streamed (fresh, then the same prompt again from the prefix cache) and not
streamed, and the OpenAI completions and chat streams with usage. The server was started with
``--max-running-requests 4 --disable-cuda-graph --max-total-tokens 65536 --enable-metrics``.
CI has no SGLang: these keep the parsers honest about the shapes a current release sends.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_llmperf.core.cache_metrics import cache_counters
from pytest_llmperf.core.records import RequestRecord
from pytest_llmperf.core.server_probe import (
    accept_length,
    classify_server,
    decode_cuda_graph_max_bs,
    effective_running_cap,
    parse_metrics,
    server_facts,
)
from pytest_llmperf.core.stream_parsers import GenerateStreamParser, OpenAIStreamParser

DATA = Path(__file__).parent.parent / "data" / "sglang-0.5.23"


def _json(name: str) -> Any:
    return json.loads((DATA / name).read_text())


@pytest.fixture
def info() -> dict[str, Any]:
    loaded: dict[str, Any] = _json("server_info.json")
    return loaded


def test_server_facts_from_the_real_server_info(info: dict[str, Any]) -> None:
    facts = server_facts(info, url="http://h:1", mode="attached")
    assert facts.version == "0.5.23"
    assert facts.model_path == "/models/tiny-llama"
    assert (
        facts.max_running_requests == 4
    )  # internal_states[0].effective_max_running_requests_per_dp
    assert (facts.dp_size, facts.speculative_algorithm) == (1, None)
    assert facts.server_args["max_total_num_tokens"] == 65536
    assert facts.server_args["chunked_prefill_size"] == 4096
    assert facts.server_args["tp_size"] == 1
    # capture is off on this CPU server: no graph size, whichever key would have held one
    assert "cuda_graph_max_bs" not in facts.server_args
    # launch_command repeats the argv, --api-key included when given: never kept
    assert "launch_command" not in facts.server_args and "api_key" not in facts.server_args
    assert accept_length(info) is None


def test_the_cap_follows_the_schedulers_effective_figure(info: dict[str, Any]) -> None:
    assert effective_running_cap(info) == 4
    info["internal_states"][0]["effective_max_running_requests_per_dp"] = 48
    assert effective_running_cap(info) == 48  # e.g. the 48 speculative decoding resets it to


def test_decode_cuda_graph_size_in_each_releases_spelling(info: dict[str, Any]) -> None:
    # 0.5.23 as captured: capture off (decode backend "disabled", nothing captured)
    assert info["cuda_graph_config"]["decode"]["backend"] == "disabled"
    assert info["internal_states"][0]["decode_cuda_graph_bs"] == []
    assert "cuda_graph_max_bs" not in info
    assert decode_cuda_graph_max_bs(info) is None
    # the same answer on a GPU server that captured graphs: the captured sizes decide
    on = copy.deepcopy(info)
    on["cuda_graph_config"]["decode"]["backend"] = "full"
    on["internal_states"][0]["decode_cuda_graph_bs"] = [1, 2, 4, 8, 12, 16]
    assert decode_cuda_graph_max_bs(on) == 16
    # without the per-rank list: the resolved config's max_bs (32 here), not the raw flag
    del on["internal_states"][0]["decode_cuda_graph_bs"]
    assert on["cuda_graph_max_bs_decode"] is None
    assert decode_cuda_graph_max_bs(on) == 32
    # two DP ranks: each runs its own batch, so the smaller capture is the limit
    two = copy.deepcopy(info)
    two["internal_states"] = [
        {**info["internal_states"][0], "decode_cuda_graph_bs": [1, 8, 24]},
        {**info["internal_states"][0], "decode_cuda_graph_bs": [1, 8, 16]},
    ]
    assert decode_cuda_graph_max_bs(two) == 16
    # older releases: a flat cuda_graph_max_bs, switched off by disable_cuda_graph
    assert decode_cuda_graph_max_bs({"cuda_graph_max_bs": 160}) == 160
    assert decode_cuda_graph_max_bs({"cuda_graph_max_bs": 160, "disable_cuda_graph": True}) is None
    assert decode_cuda_graph_max_bs({}) is None


def test_facts_carry_the_graph_size_under_one_key(info: dict[str, Any]) -> None:
    on = copy.deepcopy(info)
    on["cuda_graph_config"]["decode"]["backend"] = "full"
    on["internal_states"][0]["decode_cuda_graph_bs"] = [1, 2, 4]
    assert server_facts(on).server_args["cuda_graph_max_bs"] == 4
    assert server_facts({"cuda_graph_max_bs": 64}).server_args["cuda_graph_max_bs"] == 64


def test_the_real_server_classifies_as_sglang(info: dict[str, Any]) -> None:
    kind = classify_server(
        health_route="/health_generate",
        models=_json("v1_models.json"),
        server_info=info,
        cache_reset_route="/flush_cache",
    )
    assert (kind.kind, kind.backend, kind.owned_by) == ("sglang", "sglang", "sglang")
    assert kind.served_model == "/models/tiny-llama"


def test_model_info_names_the_model_and_generates() -> None:
    # What a reader of /get_model_info (deprecated alias of /model_info) can count on.
    model = _json("get_model_info.json")
    assert model["model_path"] == "/models/tiny-llama" and model["is_generation"] is True
    assert model["architectures"] == ["LlamaForCausalLM"]


def test_metrics_names_the_plugin_reads_are_exported() -> None:
    text = (DATA / "metrics.txt").read_text()
    gauges = parse_metrics(text)
    # idle server: gauges at 0; the accept-length gauge is 0.0 without speculative decoding
    assert gauges == {
        "sglang:num_running_reqs": 0.0,
        "sglang:num_queue_reqs": 0.0,
        "sglang:gen_throughput": 0.0,
    }
    # cached_tokens_total (cache_source="device") over prompt_tokens_total (two is_streaming sets)
    assert cache_counters(text) == (19.0, 85.0)


def _parse(parser: GenerateStreamParser | OpenAIStreamParser, name: str) -> None:
    body = (DATA / name).read_bytes()
    for i, event in enumerate(body.split(b"\n\n")):  # one read per event, as sent
        if event:
            parser.feed(event + b"\n\n", float(i + 1))
    parser.finish()


def test_generate_stream_fresh_then_from_the_prefix_cache() -> None:
    fresh = RequestRecord(index=0, t_send=0.0)
    _parse(GenerateStreamParser(fresh), "generate_stream.sse")
    assert fresh.ok, fresh.error
    assert (fresh.output_tokens, fresh.prompt_tokens, fresh.cached_tokens) == (8, 12, 0)
    # the server sent completion_tokens 5 then 7: one event carried two tokens
    assert fresh.events == 7 and len(fresh.token_times) == 8
    assert fresh.spec_accept_length is None
    again = RequestRecord(index=1, t_send=0.0)
    _parse(GenerateStreamParser(again), "generate_stream_cached.sse")
    assert again.ok, again.error
    # 11 of 12 prompt tokens from the radix cache (the last one is always recomputed)
    assert (again.output_tokens, again.prompt_tokens, again.cached_tokens) == (8, 12, 11)


def test_generate_without_stream_has_meta_info_last() -> None:
    body = _json("generate_input_ids.json")
    meta = body["meta_info"]
    assert (meta["prompt_tokens"], meta["completion_tokens"], meta["cached_tokens"]) == (12, 4, 0)
    assert list(body)[-1] == "meta_info"  # what the stream parser's meta_info_of relies on
    assert len(body["output_ids"]) == 4


@pytest.mark.parametrize(
    ("name", "chat", "prompt"),
    [("completions_stream.sse", False, 9), ("chat_stream.sse", True, 17)],
)
def test_openai_streams_with_usage(name: str, chat: bool, prompt: int) -> None:
    rec = RequestRecord(index=0, t_send=0.0)
    _parse(OpenAIStreamParser(rec, chat=chat), name)
    assert rec.ok, rec.error
    assert (rec.output_tokens, rec.prompt_tokens) == (6, prompt)
    # no --enable-cache-report: usage has no prompt_tokens_details.cached_tokens
    assert rec.cached_tokens == 0
