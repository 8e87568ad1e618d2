"""``sglang.launch_server``-compatible command line for the simulator.

Flags keep SGLang's names, aliases and defaults, and argparse keeps ``allow_abbrev`` as SGLang
does, so ``--tp 2`` works. Unknown flags are accepted and logged rather than rejected: real
flag names drift between SGLang releases and a suite's config must run against the simulator
unchanged. A malformed value of a *known* flag still exits 2 with argparse's message.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_llmperf.sim.faults import FAULT_HELP, Faults, build_faults, parse_fault
from pytest_llmperf.sim.knobs import ServerKnobs

_SLOWDOWN_RE = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*:\s*([0-9.]+)\s*$")


def parse_slowdown(value: str) -> tuple[int, int, float]:
    """``LO-HI:FACTOR`` -> (lo, hi, factor): steps with batch size in [lo, hi] run slower."""
    m = _SLOWDOWN_RE.match(value)
    if not m:
        raise argparse.ArgumentTypeError(
            f"invalid slowdown {value!r}; expected LO-HI:FACTOR, e.g. 33-64:1.5"
        )
    lo, hi, factor = int(m.group(1)), int(m.group(2)), float(m.group(3))
    if lo > hi or factor <= 0:
        raise argparse.ArgumentTypeError(
            f"invalid slowdown {value!r}; need LO <= HI and FACTOR > 0"
        )
    return lo, hi, factor


def _positive_float(value: str) -> float:
    f = float(value)
    if f <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value!r}")
    return f


def _template_overhead(value: str) -> tuple[int, int]:
    parts = value.split(",")
    try:
        per_msg, const = (int(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid chat template overhead {value!r}; expected PER_MESSAGE,CONSTANT, e.g. 5,5"
        ) from None
    if per_msg < 0 or const < 0:
        raise argparse.ArgumentTypeError(f"chat template overhead {value!r} must be >= 0")
    return per_msg, const


def _positive_int(value: str) -> int:
    n = int(value)
    if n <= 0:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value!r}")
    return n


@dataclass(frozen=True)
class SimArgs:
    """Everything the command line says: the performance knobs plus the front-only options."""

    knobs: ServerKnobs
    faults: Faults
    trust_remote_code: bool = False
    unknown_args: tuple[str, ...] = ()


def build_parser() -> argparse.ArgumentParser:
    """The parser; ``allow_abbrev`` stays True (argparse's default), exactly like SGLang."""
    p = argparse.ArgumentParser(
        prog="python -m pytest_llmperf.sim",
        description=(
            "Simulated SGLang server: SGLang's HTTP API and launch flags over a performance "
            "model. Takes sglang.launch_server's flags; unknown flags are accepted and logged."
        ),
        epilog="--sim-fault values:\n" + FAULT_HELP.split("\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=True,
    )
    d = ServerKnobs()
    g = p.add_argument_group("SGLang flags")
    g.add_argument("--model-path", "--model", dest="model_path", default=d.model_path)
    g.add_argument("--served-model-name", default=None)
    g.add_argument("--host", default=d.host)
    g.add_argument("--port", type=int, default=d.port)
    g.add_argument("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    g.add_argument("--dp-size", "--data-parallel-size", dest="dp_size", type=int, default=1)
    g.add_argument("--mem-fraction-static", type=float, default=None)
    g.add_argument("--max-running-requests", type=int, default=None)
    g.add_argument("--max-total-tokens", type=int, default=None)
    g.add_argument("--chunked-prefill-size", type=int, default=None)
    g.add_argument("--context-length", type=int, default=None)
    g.add_argument("--api-key", default=None)
    g.add_argument("--speculative-algorithm", default=None)
    g.add_argument(
        "--speculative-draft-model-path",
        "--speculative-draft-model",
        dest="speculative_draft_model_path",
        default=None,
    )
    g.add_argument("--speculative-num-steps", type=int, default=None)
    g.add_argument("--speculative-eagle-topk", type=int, default=None)
    g.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    g.add_argument("--stream-interval", type=int, default=d.stream_interval)
    g.add_argument("--cuda-graph-max-bs", type=int, default=None)
    g.add_argument("--disable-cuda-graph", action="store_true")
    g.add_argument("--enable-metrics", action="store_true")
    g.add_argument("--skip-server-warmup", action="store_true")
    g.add_argument("--decode-log-interval", type=int, default=d.decode_log_interval)
    g.add_argument("--log-level", default=d.log_level)
    g.add_argument("--trust-remote-code", action="store_true")
    g.add_argument("--enable-cache-report", action="store_true")
    g.add_argument("--disable-radix-cache", action="store_true")
    v = p.add_argument_group("vLLM flags (with --sim-api vllm)")
    v.add_argument("--enable-prompt-tokens-details", action="store_true")
    v.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="vLLM's switch; --no-enable-prefix-caching turns the prefix cache off",
    )

    s = p.add_argument_group("simulator-only flags")
    s.add_argument(
        "--sim-profile", default=None, help="hardware/model profile name or path to a JSON file"
    )
    s.add_argument("--sim-seed", type=int, default=d.sim_seed)
    s.add_argument(
        "--sim-jitter",
        type=float,
        default=d.sim_jitter,
        help="run-to-run speed jitter as a fraction (0.03 = +-3%%), drawn once per process",
    )
    s.add_argument(
        "--sim-time-scale",
        type=_positive_float,
        default=d.sim_time_scale,
        help=">1 runs the model slower than real time",
    )
    s.add_argument(
        "--sim-slowdown",
        type=parse_slowdown,
        action="append",
        default=None,
        metavar="LO-HI:FACTOR",
        help="steps whose running batch size is in [LO, HI] take FACTOR x longer (repeatable)",
    )
    s.add_argument(
        "--sim-api",
        choices=("sglang", "vllm"),
        default="sglang",
        help="whose HTTP API to serve: sglang (default) or vllm (GET /health, /v1/models, "
        "/metrics with vllm: names, /version, POST /v1/completions, /v1/chat/completions, "
        "/reset_prefix_cache; SGLang routes 404; a request naming another model gets vLLM's "
        "404 error)",
    )
    s.add_argument(
        "--sim-chat-template-overhead",
        type=_template_overhead,
        default=d.sim_chat_template_overhead,
        metavar="PER_MESSAGE,CONSTANT",
        help="tokens a chat template adds to /v1/chat/completions prompts: PER_MESSAGE per "
        "message plus CONSTANT (default 5,5, a Llama-3 template); counted in "
        "usage.prompt_tokens as a real engine does; 0,0 counts content words only",
    )
    s.add_argument(
        "--sim-keepalive-timeout",
        type=_positive_float,
        default=None,
        metavar="SECONDS",
        help="close a keep-alive connection idle longer than SECONDS without any header, as "
        "llama.cpp's llama-server (cpp-httplib, 5 s) does; responses then carry httplib's "
        "'Keep-Alive: timeout=S, max=N' and errors (>= 400) 'Connection: close'",
    )
    s.add_argument(
        "--sim-keepalive-max-requests",
        type=_positive_int,
        default=None,
        metavar="N",
        help="serve at most N responses per connection (cpp-httplib: 100); the Nth carries "
        "'Connection: close' and the server closes the connection after it",
    )
    s.add_argument(
        "--sim-fault",
        type=parse_fault,
        action="append",
        default=None,
        metavar="FAULT[=N]",
        help="inject a failure (repeatable); values listed below",
    )
    return p


def parse_args(argv: Sequence[str] | None = None) -> SimArgs:
    """Parse argv into ``SimArgs``; exits 2 (argparse) on a malformed value of a known flag."""
    parser = build_parser()
    ns, unknown = parser.parse_known_args(argv)
    for name in ("tp_size", "dp_size", "stream_interval", "decode_log_interval"):
        if getattr(ns, name) < 1:
            parser.error(f"argument --{name.replace('_', '-')}: must be >= 1")
    if not 0 <= ns.port <= 65535:
        parser.error(f"argument --port: {ns.port} is not a valid port")
    spec = ns.speculative_algorithm.upper() if ns.speculative_algorithm else None
    knobs = ServerKnobs(
        model_path=ns.model_path,
        served_model_name=ns.served_model_name,
        host=ns.host,
        port=ns.port,
        tp_size=ns.tp_size,
        dp_size=ns.dp_size,
        mem_fraction_static=ns.mem_fraction_static,
        max_running_requests=ns.max_running_requests,
        max_total_tokens=ns.max_total_tokens,
        chunked_prefill_size=ns.chunked_prefill_size,
        context_length=ns.context_length,
        api_key=ns.api_key,
        speculative_algorithm=spec,
        speculative_draft_model_path=ns.speculative_draft_model_path,
        speculative_num_steps=ns.speculative_num_steps,
        speculative_eagle_topk=ns.speculative_eagle_topk,
        speculative_num_draft_tokens=ns.speculative_num_draft_tokens,
        stream_interval=ns.stream_interval,
        cuda_graph_max_bs=ns.cuda_graph_max_bs,
        disable_cuda_graph=ns.disable_cuda_graph,
        enable_metrics=ns.enable_metrics,
        skip_server_warmup=ns.skip_server_warmup,
        decode_log_interval=ns.decode_log_interval,
        log_level=ns.log_level,
        sim_profile=ns.sim_profile,
        sim_seed=ns.sim_seed,
        sim_jitter=ns.sim_jitter,
        sim_time_scale=ns.sim_time_scale,
        sim_slowdown=tuple(ns.sim_slowdown or ()),
        sim_keepalive_timeout=ns.sim_keepalive_timeout,
        sim_api=ns.sim_api,
        sim_chat_template_overhead=ns.sim_chat_template_overhead,
        enable_cache_report=ns.enable_cache_report,
        disable_radix_cache=ns.disable_radix_cache or ns.enable_prefix_caching is False,
        enable_prompt_tokens_details=ns.enable_prompt_tokens_details,
        sim_keepalive_max_requests=ns.sim_keepalive_max_requests,
        unknown_args=tuple(unknown),
    )
    return SimArgs(
        knobs=knobs,
        faults=build_faults(ns.sim_fault),
        trust_remote_code=ns.trust_remote_code,
        unknown_args=tuple(unknown),
    )
