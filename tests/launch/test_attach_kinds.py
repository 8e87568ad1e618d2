"""Attaching to servers that are not SGLang: readiness by the route that exists, the served
model, the cache-reset route and the backend, found from what the server answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_llmperf.base.results import Workload
from pytest_llmperf.core.server_probe import classify_server, served_model
from pytest_llmperf.launch.launcher import attach
from pytest_llmperf.run.perfrun import PerfRun, PointError
from pytest_llmperf.run.suite import suite_from_data
from tests.sim_servers import VllmSim

SERVED = "small"


def test_classify_from_answers() -> None:
    vllm_models = {"data": [{"id": "m", "owned_by": "vllm"}]}
    assert served_model(vllm_models) == ("m", "vllm")
    assert served_model({"data": []}) == (None, None) and served_model("junk") == (None, None)
    vllm = classify_server(health_route="/health", models=vllm_models)
    assert (vllm.kind, vllm.backend, vllm.served_model) == ("vllm", "openai", "m")
    llama = classify_server(
        health_route="/health", models={"data": [{"id": "small", "owned_by": "llamacpp"}]}
    )
    assert llama.kind == "openai-compatible" and llama.backend == "openai"
    assert llama.describe().startswith("OpenAI-compatible (owned_by llamacpp) serving 'small'")
    sgl = classify_server(health_route="/health_generate", cache_reset_route="/flush_cache")
    assert sgl.kind == "sglang" and sgl.backend == "sglang"
    dev_info = classify_server(health_route="/health", server_info={"vllm_config": "..."})
    assert dev_info.kind == "vllm" and dev_info.has_server_info


def test_attach_to_vllm_finds_kind_model_and_reset_route() -> None:
    with VllmSim(SERVED, loading_polls=3) as server:
        handle = attach(server.url, timeout_s=10)
        kind = handle.kind
        assert kind is not None
        assert kind.kind == "vllm" and kind.health_route == "/health"
        assert kind.served_model == SERVED and kind.backend == "openai"
        assert kind.cache_reset_route == "/reset_prefix_cache" and not kind.has_server_info
        assert kind.describe() == (
            "vLLM serving 'small'; ready by /health; cache reset by /reset_prefix_cache;"
            " no /server_info; backend openai"
        )
        # It waited through the 503s on /health (the route that exists), never asked /generate.
        assert server.requests.paths.count("GET /health") == 4
        assert not any("/generate" in p for p in server.requests.paths)


def test_attach_without_reset_route_says_none() -> None:
    with VllmSim(SERVED, dev_mode=False) as server:
        kind = attach(server.url, timeout_s=10).kind
        assert kind is not None and kind.cache_reset_route is None
        assert "no cache reset route" in kind.describe()


def perf_run(url: str, out: Path) -> PerfRun:
    suite = suite_from_data({"server": [{"name": "v", "model": "whatever"}]}, source="test")
    return PerfRun(suite=suite, output_dir=out, url=url)


def test_perf_run_against_vllm(tmp_path: Path) -> None:
    with VllmSim(SERVED) as server:
        run = perf_run(server.url, tmp_path)
        assert run.mode_for("v") == "attached"
        assert run.suggested_backend("v") == "openai"
        assert (run.server_description("v") or "").startswith("vLLM serving 'small'")
        # The default sglang backend cannot drive it: a clear error, nothing sent.
        with pytest.raises(PointError, match="set the backend to 'openai'"):
            run.measure("v", Workload(input_len=8, output_len=4, requests_per_level=2), 1)
        assert server.requests.models_asked == []
        wl = Workload(backend="openai", input_len=8, output_len=4, requests_per_level=2)
        level = run.measure("v", wl, 1)
        assert level.completed == 2 and level.failed == 0
        assert level.total_output_tokens == 8
        # Requests named the served model (a wrong one would get 404), the cache was reset.
        assert server.requests.models_asked[-2:] == [SERVED, SERVED]
        assert server.requests.resets >= 2  # once at attach (discovery), once before the level
        facts = run.facts("v")
        assert facts is not None and facts.model_path == SERVED
        assert facts.server_args["server_kind"] == "vllm"
        assert facts.server_args["cache_reset_route"] == "/reset_prefix_cache"
        run.close()


def test_wrong_model_is_refused_by_the_simulator() -> None:
    # The simulated vLLM is strict: the test above would fail if the model were not discovered.
    import httpx

    with VllmSim(SERVED) as server:
        r = httpx.post(
            f"{server.url}/v1/completions",
            json={"model": "default", "prompt": "hi", "max_tokens": 2, "stream": True},
            trust_env=False,
        )
        assert r.status_code == 404 and "does not exist" in r.text
        assert httpx.get(f"{server.url}/generate", trust_env=False).status_code == 404


def test_header_names_the_backend_an_attached_server_takes(pytester: pytest.Pytester) -> None:
    """A user attaching to vLLM or llama-server without choosing a backend reads the workload
    the run will use (it said ``sglang-...`` while the openai backend was used)."""
    pytester.makefile(".toml", llmperf='[[server]]\nname = "v"\nmodel = "small"\n')
    pytester.makepyfile(test_perf="def test_sweep(llmperf_point):\n    pass\n")
    with VllmSim(SERVED) as server:
        result = pytester.runpytest_subprocess(
            "--collect-only", "--llmperf-url", server.url, "-p", "no:randomly", timeout=120
        )
    result.stdout.fnmatch_lines(["llmperf: levels *; workload openai-*"])
    assert "workload sglang-" not in result.stdout.str()
