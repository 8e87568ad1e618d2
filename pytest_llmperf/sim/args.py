"""``sglang.launch_server``-compatible command line for the simulator.

Flags keep SGLang's names, aliases and defaults, and argparse keeps ``allow_abbrev`` as SGLang
does, so ``--tp 2`` works. Unknown flags are accepted and logged rather than rejected: real
flag names drift between SGLang releases and a suite's config must run against the simulator
unchanged. A malformed value of a *known* flag still exits 2 with argparse's message.

SGLang's and vLLM's own flags take argparse's ``int``/``float`` as their parsers do (so their
messages read the same); the simulator's ``--sim-*`` flags take the package's shared value
parsers (``base/values.py``), as the settings and the ``llmperf`` CLI do.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from pytest_llmperf.base.values import (
    argparse_type,
    parse_float,
    parse_int,
    parse_nonneg_float,
    parse_nonneg_int,
    parse_positive_float,
    parse_positive_int,
    parse_unit_float,
)
from pytest_llmperf.sim.faults import FAULT_HELP, Faults, build_faults, parse_fault
from pytest_llmperf.sim.knobs import ServerKnobs
from pytest_llmperf.sim.noise import NOISE_PRESETS

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


_positive_float = argparse_type(parse_positive_float)
_positive_int = argparse_type(parse_positive_int)
_fraction = argparse_type(parse_unit_float)
_non_negative = argparse_type(parse_nonneg_float)


def _template_overhead(value: str) -> tuple[int, int]:
    parts = value.split(",")
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(
            f"invalid chat template overhead {value!r}; expected PER_MESSAGE,CONSTANT, e.g. 5,5"
        )
    try:
        per_msg, const = (parse_nonneg_int(p) for p in parts)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"chat template overhead {value!r}: {exc}") from None
    return per_msg, const


@argparse_type
def _step_jitter(value: str) -> float:
    f = parse_nonneg_float(value)
    if f >= 0.5:
        raise ValueError(f"must be below 0.5, got {f:g}")
    return f


_VERSION_RE = re.compile(r"^[0-9][0-9A-Za-z.+\-]*$")


def _version(value: str) -> str:
    if not _VERSION_RE.match(value):
        raise argparse.ArgumentTypeError(
            f"invalid version {value!r}; expected a release such as 0.5.9 or 0.5.10rc0"
        )
    return value


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
    g.add_argument("--allow-auto-truncate", action="store_true")
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
    g.add_argument(
        "--enable-deterministic-inference",
        action="store_true",
        help="greedy outputs do not depend on batching (turns --sim-nondeterminism off)",
    )
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
    s.add_argument("--sim-seed", type=argparse_type(parse_int), default=d.sim_seed)
    s.add_argument(
        "--sim-jitter",
        type=argparse_type(parse_float),
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
    _add_realism_flags(p)
    s.add_argument(
        "--sim-fault",
        type=parse_fault,
        action="append",
        default=None,
        metavar="FAULT[=N]",
        help="inject a failure (repeatable); values listed below",
    )
    return p


def _add_realism_flags(p: argparse.ArgumentParser) -> None:
    """Noise like a shared GPU box, start-up time, accept length and version (sim/noise.py)."""
    n = p.add_argument_group(
        "simulator noise and regressions",
        "Noise terms multiply step time; unset flags take the --sim-noise preset, else the "
        "profile's 'noise' (quiet by default). Exact semantics: pytest_llmperf/sim/noise.py.",
    )
    n.add_argument(
        "--sim-noise",
        choices=tuple(NOISE_PRESETS),
        default=None,
        help="noise preset: quiet (no noise, the calibrated default) or gpu-shared (launch "
        "speed sd 0.15, drift sd 0.10 over 30 s, step jitter 0.02, a 250 ms stall every 50 s "
        "on average); explicit --sim-* noise flags override single terms",
    )
    n.add_argument(
        "--sim-launch-speed-sd",
        type=_fraction,
        default=None,
        metavar="SD",
        help="per-launch speed: every step takes exp(SD*z) longer, z ~ N(0,1) clipped to +-3, "
        "drawn from --sim-seed and the launch nonce (differs per launch)",
    )
    n.add_argument(
        "--sim-launch-nonce",
        default=None,
        metavar="NONCE",
        help="fix the launch nonce (default: pid and clock, logged at start) to reproduce a "
        "launch's speed factor, drift and stalls together with the same --sim-seed",
    )
    n.add_argument(
        "--sim-launch-sequence",
        default=None,
        metavar="FILE",
        help="number launches through a counter in FILE (created at 0): the n-th launch's "
        "nonce is seq-n, so a series of launches (a recording, then a judged run) draws the "
        "same speeds again with the same --sim-seed and a fresh FILE",
    )
    n.add_argument(
        "--sim-drift-sd",
        type=_fraction,
        default=None,
        metavar="SD",
        help="within-run drift: step time x exp(x - SD^2/2), x an Ornstein-Uhlenbeck walk with "
        "stationary sd SD",
    )
    n.add_argument(
        "--sim-drift-period",
        type=_positive_float,
        default=None,
        metavar="SECONDS",
        help="correlation time of the drift (default 60; gpu-shared: 30)",
    )
    n.add_argument(
        "--sim-step-jitter",
        type=_step_jitter,
        default=None,
        metavar="J",
        help="per-step jitter: each step x uniform [1-J, 1+J] (overrides the profile's)",
    )
    n.add_argument(
        "--sim-stall-rate",
        type=_non_negative,
        default=None,
        metavar="PER_S",
        help="rare stalls: Poisson rate per second of busy engine time",
    )
    n.add_argument(
        "--sim-stall-ms",
        type=_non_negative,
        default=None,
        metavar="MS",
        help="each stall adds MS milliseconds to the step it lands in",
    )
    n.add_argument(
        "--sim-load-time",
        type=_non_negative,
        default=0.0,
        metavar="SECONDS",
        help="model-load time: the port binds (so /health_generate can answer 200 and the "
        "ready line prints) SECONDS after 'Load weight begin' (default 0)",
    )
    n.add_argument(
        "--sim-accept-scale",
        type=_positive_float,
        default=1.0,
        metavar="F",
        help="multiply the profile's speculative accept length (kept within [1, steps+1]); "
        "0.8 simulates 'accept length fell after an upgrade'",
    )
    n.add_argument(
        "--sim-accuracy",
        type=argparse_type(parse_unit_float),
        default=0.0,
        metavar="P",
        help="share of the accuracy probe's generated items answered right, in [0, 1] (an item "
        "is right when its hash falls below P, so a lower P loses items a higher one answers); "
        "0: the probe's prompts get the simulator's usual meaningless text, as a random model",
    )
    n.add_argument(
        "--sim-version",
        type=_version,
        default=None,
        metavar="X.Y.Z",
        help="version the server reports (/server_info 'version'; /version with --sim-api "
        "vllm), e.g. to show which release a bisect measured",
    )
    n.add_argument(
        "--sim-diverge-share",
        type=_fraction,
        default=0.0,
        metavar="SHARE",
        help="this share of prompts (chosen by a seeded draw from the prompt) get another "
        "greedy answer from a seeded position on: a version whose outputs changed",
    )
    n.add_argument(
        "--sim-nondeterminism",
        type=_fraction,
        default=0.0,
        metavar="RATE",
        help="each greedy answer drifts from a random position with this probability, as "
        "batching makes temperature 0 drift; off with --enable-deterministic-inference",
    )


def parse_args(argv: Sequence[str] | None = None) -> SimArgs:
    """Parse argv into ``SimArgs``; exits 2 (argparse) on a malformed value of a known flag."""
    parser = build_parser()
    ns, unknown = parser.parse_known_args(argv)
    for name in ("tp_size", "dp_size", "stream_interval", "decode_log_interval"):
        if getattr(ns, name) < 1:
            parser.error(f"argument --{name.replace('_', '-')}: must be >= 1")
    if not 0 <= ns.port <= 65535:
        parser.error(f"argument --port: {ns.port} is not a valid port")
    # Each knob is the flag of the same name (its dest), but for these four.
    derived: dict[str, Any] = {
        "speculative_algorithm": (
            ns.speculative_algorithm.upper() if ns.speculative_algorithm else None
        ),
        "sim_slowdown": tuple(ns.sim_slowdown or ()),
        "disable_radix_cache": ns.disable_radix_cache or ns.enable_prefix_caching is False,
        "unknown_args": tuple(unknown),
    }
    given = vars(ns) | derived
    knobs = ServerKnobs(**{k.name: given[k.name] for k in fields(ServerKnobs)})
    return SimArgs(
        knobs=knobs,
        faults=build_faults(ns.sim_fault),
        trust_remote_code=ns.trust_remote_code,
        unknown_args=tuple(unknown),
    )
