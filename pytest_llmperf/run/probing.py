"""One launch's answers to the greedy consistency probes (``core/probes.py``), taken on the
live server of a config between timed levels, never inside one."""

from __future__ import annotations

from pytest_llmperf.base.probes import ProbeSet
from pytest_llmperf.base.results import Backend, Workload
from pytest_llmperf.core.probes import probe_prompts, run_probes
from pytest_llmperf.run.perfrun import PerfRun

# Probes are short: a set that takes longer than this is a server problem, not a probe.
PROBE_DEADLINE_S = 120.0
PROBE_CONCURRENCY = 4


def probe_launch(run: PerfRun, config: str, workload: Workload) -> ProbeSet | None:
    """The live launch's answers (launching it if none is up); None when probes are off.
    Raises ``ProbeError`` when the server does not answer them."""
    count = run.options.probes
    if count <= 0:
        return None
    with run.servers.lock:
        handle = run.server(config)
        backend: Backend = "sglang" if workload.backend == "sglang" else "openai"
        unit, outputs = run_probes(
            handle.url,
            probe_prompts(count, workload.seed),
            backend=backend,
            max_new_tokens=run.options.probe_tokens,
            api_key=handle.api_key,
            concurrency=PROBE_CONCURRENCY,
            deadline_s=PROBE_DEADLINE_S,
        )
        facts = run.facts(config)
        declared = bool(facts and facts.server_args.get("enable_deterministic_inference"))
        return ProbeSet(
            seed=workload.seed,
            max_new_tokens=run.options.probe_tokens,
            unit=unit,
            deterministic=declared,
            outputs=outputs,
        )
