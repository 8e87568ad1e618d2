"""Each launch's answers to the greedy consistency probes (``core/probes.py``), taken on the
live server of a config between timed levels, never inside one (the run's server lock).

A launch answers the probes at most once per session: every check that needs its answers (the
A/B's rounds, a point judged against its baseline, a recording) reuses them. A recording asks
each of its launches while it is up, so the entry carries the A/A between them.
"""

from __future__ import annotations

import contextlib

from pytest_llmperf.base.probes import LaunchProbes, ProbeSet
from pytest_llmperf.base.results import Workload
from pytest_llmperf.core.probes import ProbeError, probe_prompts, run_probes
from pytest_llmperf.run.perfrun import PerfRun, PointError
from pytest_llmperf.verdicts.consistency import Consistency, judge_consistency
from pytest_llmperf.verdicts.verdict import Verdict

__all__ = [
    "PROBE_DEADLINE_S",
    "answer_every_launch",
    "answered",
    "judge_point",
    "launch_probes",
    "probe_launch",
    "probed",
]

# Probes are short: a set that takes longer than this is a server problem, not a probe.
PROBE_DEADLINE_S = 120.0
PROBE_CONCURRENCY = 4


def _kind(run: PerfRun, workload: Workload) -> tuple[int, int, int, str]:
    return (run.options.probes, run.options.probe_tokens, workload.seed, workload.backend)


def probe_launch(run: PerfRun, config: str, workload: Workload) -> ProbeSet | None:
    """The live launch's answers (launching it if none is up), asked once per launch; None
    when probes are off. Raises ``ProbeError`` when the server does not answer them."""
    count = run.options.probes
    if count <= 0:
        return None
    with run.servers.lock:
        handle = run.server(config)
        key = (config, run.servers.live_launch(config), *_kind(run, workload))
        done = run.probes.get(key)
        if isinstance(done, ProbeError):
            raise done  # a launch that could not answer is not asked again
        if done is not None:
            return done
        try:
            unit, outputs = run_probes(
                handle.url,
                probe_prompts(count, workload.seed),
                backend=workload.backend,
                max_new_tokens=run.options.probe_tokens,
                model=handle.kind.served_model if handle.kind is not None else None,
                api_key=handle.api_key,
                concurrency=PROBE_CONCURRENCY,
                request_timeout_s=workload.request_timeout_s,
                deadline_s=PROBE_DEADLINE_S,
            )
        except ProbeError as exc:
            run.probes[key] = exc
            raise
        facts = run.facts(config)
        declared = bool(facts and facts.server_args.get("enable_deterministic_inference"))
        run.probes[key] = ProbeSet(
            seed=workload.seed,
            max_new_tokens=run.options.probe_tokens,
            unit=unit,
            deterministic=declared,
            outputs=outputs,
        )
        return run.probes[key]


def answer_every_launch(run: PerfRun, config: str, workload: Workload, counted: bool) -> None:
    """Have each launch of ``config`` answer this workload's probes before a fresh launch
    replaces it (``PerfRun.before_relaunch``: the sequential loop's, ``repeat``'s and re-runs'
    launches alike): each launch that answered is one more the permutation test can relabel
    (``verdicts/consistency.py``); one launch against a baseline's three is weak evidence.
    ``counted``: the answers are judged or recorded by this point; ``probe_every_launch``
    asks them all the same (results.json keeps them for ``llmperf calibrate --record``)."""
    if run.options.probes <= 0 or not (counted or run.options.probe_every_launch):
        return

    def ask() -> None:
        try:
            probe_launch(run, config, workload)
        except (ProbeError, PointError):
            pass  # a launch that cannot answer: judging the point says so (judge_point)

    run.before_relaunch[(config, "probes", *_kind(run, workload))] = ask


def answered(run: PerfRun) -> list[LaunchProbes]:
    """Every launch's answers this session, for results.json (one per launch and kind)."""
    return [
        LaunchProbes(config=c, launch=launch, backend=backend, answers=s)
        for (c, launch, _count, _tokens, _seed, backend), s in run.probes.items()
        if isinstance(s, ProbeSet)
    ]


def launch_probes(run: PerfRun, config: str, workload: Workload) -> list[ProbeSet]:
    """The answers of every launch of ``config`` that answered this workload's probes so far
    this session, in launch order."""
    kind = _kind(run, workload)
    return [
        s
        for (c, _, *k), s in run.probes.items()
        if c == config and tuple(k) == kind and isinstance(s, ProbeSet)
    ]


def probed(run: PerfRun, config: str, workload: Workload) -> list[ProbeSet]:
    """``launch_probes``, the live launch's answers among them (asked now if it has not
    answered), or a new launch's when none is up and none answered yet."""
    if run.servers.live_launch(config) is not None or not launch_probes(run, config, workload):
        probe_launch(run, config, workload)
    return launch_probes(run, config, workload)


def judge_point(
    run: PerfRun,
    config: str,
    workload: Workload,
    old: list[ProbeSet] | None,
    *,
    update: bool,
) -> Consistency | None:
    """This session's launches of ``config`` against a baseline entry's probe answers (``old``).
    None with probes off, or when the entry has none and this run is not recording (an entry
    recorded before the probes existed is not judged on them until recorded again)."""
    if run.options.probes <= 0:
        return None
    if old is None and not update:
        if run.options.probe_every_launch:
            # kept in results.json (``answered``); a launch that cannot answer leaves none there
            with contextlib.suppress(ProbeError, PointError):
                probed(run, config, workload)
        return None
    try:
        new = probed(run, config, workload)
    except (ProbeError, PointError) as exc:
        why = f"consistency: probes not answered ({exc}); probes = 0 turns them off"
        return Consistency(Verdict.INVALID, why, 0, 0, 0, 0, None, None, None)
    if old is None:
        return Consistency(Verdict.MISSING, "consistency: the baseline has no probe answers",
                           0, 0, 0, 0, None, None, None)  # fmt: skip
    return judge_consistency(old, new, old_label="the baseline", new_label="this run")
