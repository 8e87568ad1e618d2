"""Baselines recorded from several unchanged suite runs (``llmperf calibrate --record``).

One pytest session records a point from the launches it made. An attached server is never
relaunched, so a session's samples are one launch and its baseline cannot know the server's
session-to-session noise: the verdicts would assume 2 % where a busy box gives 5-15 %. The
runs of a calibration are exactly the samples that noise lives in, so each run counts as its
own launch here (launch ids are prefixed with the run), and every entry records the spread of
run means and, where the sweep has enough levels, the launch residuals over the runs (what
``adjust = "launch"`` judges; ignored otherwise).

Invalid samples (a saturated client, short outputs, failures) are left out, as the plugin
leaves them out of a recording; a point with no valid sample is named, not written.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache

from pytest_llmperf.base.metric_defs import METRICS
from pytest_llmperf.base.probes import ProbeSet
from pytest_llmperf.base.results import LevelResult, ServerFacts, Workload
from pytest_llmperf.report.results_file import RunFile
from pytest_llmperf.report.tables import redact_args
from pytest_llmperf.run.adjust import baseline_residuals, can_adjust
from pytest_llmperf.run.perfrun import PerfRun
from pytest_llmperf.verdicts.baseline import BaselineStore, FlushReport, entry_from_levels
from pytest_llmperf.verdicts.baseline_file import BaselineEntry, EntryKey, Provenance
from pytest_llmperf.verdicts.launch_adjust import Launches
from pytest_llmperf.verdicts.validity import ValidityPolicy, check_level

__all__ = [
    "RECORDED_METRICS",
    "Recording",
    "git_commit",
    "provenance",
    "record_runs",
    "recorded_entry",
    "run_provenance",
    "valid_samples",
]

# Recorded in every new baseline entry (those measured: goodput only with an SLO); only
# ``metrics`` (or compare's defaults) are gated.
RECORDED_METRICS: tuple[str, ...] = tuple(
    m for m in METRICS if m not in ("crossover_concurrency", "max_concurrency_within_slo")
)


@cache
def git_commit() -> str | None:
    """The checkout's commit, for baseline provenance (None outside git)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def provenance(facts: ServerFacts | None, hardware: str, git_commit: str | None) -> Provenance:
    """Where a recorded entry's numbers came from (server args redacted)."""
    if facts is None:
        return Provenance(git_commit=git_commit)
    return Provenance(
        sglang_version=facts.version,
        server_args=redact_args(dict(facts.server_args)),
        model_path=facts.model_path,
        sim_profile=facts.sim_profile,
        gpu=None if facts.mode == "simulated" else hardware,
        git_commit=git_commit,
    )


def run_provenance(run: PerfRun, config: str) -> Provenance:
    """``provenance`` of ``config``'s server in ``run``, at this checkout's commit."""
    return provenance(run.facts(config), run.hardware_for(config), git_commit())


def valid_samples(
    samples: Sequence[LevelResult], workload: Workload | None, policy: ValidityPolicy | None
) -> tuple[list[LevelResult], list[str]]:
    """The samples judging would use (each checked, as ``compare_point`` does) and the
    reasons of those it would leave out, one per left-out sample."""
    valid: list[LevelResult] = []
    left_out: list[str] = []
    for s in samples:
        reasons = check_level(s, workload, policy)
        if reasons:
            left_out.append(reasons[0])
        else:
            valid.append(s)
    return valid, left_out


def recorded_entry(
    samples: Sequence[LevelResult],
    by_launch: Launches | None,
    concurrency: int,
    old: BaselineEntry | None,
    *,
    version: str | None,
    git_commit: str | None,
    invalid_left_out: int = 0,
) -> BaselineEntry:
    """The entry a recording writes for one point: every recorded metric of ``samples`` (all
    valid: the caller left ``invalid_left_out`` others out), the launch residuals over
    ``by_launch`` when given, and the old entry's hand-set tolerance."""
    entry = entry_from_levels(
        samples,
        RECORDED_METRICS,
        sglang_version=version,
        git_commit=git_commit,
        invalid_left_out=invalid_left_out,
    )
    if by_launch is not None:
        res = baseline_residuals(by_launch, concurrency, list(entry.metrics))
        metrics = {
            k: m.model_copy(update={"launch_residual": res.get(k)})
            for k, m in entry.metrics.items()
        }
        entry = entry.model_copy(update={"metrics": metrics})
    if old is not None and old.tolerance is not None:
        entry = entry.model_copy(update={"tolerance": old.tolerance})  # hand-set, keep it
    gpu = next((s.gpu for s in samples if s.gpu is not None), None)
    if gpu is not None:  # the clocks the entry was measured at: a later slower GPU shows
        entry = entry.model_copy(update={"gpu": gpu})
    return entry


@dataclass
class Recording:
    """What ``record_runs`` wrote and what it could not."""

    flushed: FlushReport
    launches: dict[EntryKey, int] = field(default_factory=dict)  # runs behind each entry
    skipped: list[str] = field(default_factory=list)  # points with no valid sample
    probes: dict[EntryKey, int] = field(default_factory=dict)  # launches whose answers it kept

    def render(self) -> str:
        lines = [f"baselines recorded from the runs: {self.flushed.summary()}"]
        lines += [
            f"  {k.config} {k.workload} C={k.concurrency}: {n} runs, "
            + (
                f"probe answers of {self.probes[k]} launches"
                if self.probes.get(k)
                else "no probe answers (probes = 0, or no launch answered them)"
            )
            for k, n in sorted(self.launches.items())
        ]
        lines += [f"  not recorded: {why}" for why in self.skipped]
        return "\n".join(lines)


def _tagged(run: int, sample: LevelResult) -> LevelResult:
    lid = f"run{run}:{sample.launch or 'launch'}"
    return sample.model_copy(update={"launch": lid})


def record_runs(
    runs: Sequence[Sequence[RunFile]],
    store: BaselineStore,
    *,
    git_commit: str | None = None,
) -> Recording:
    """Write one baseline entry per point measured in ``runs`` (each run: the results files it
    wrote, one per xdist worker), each run its own launch."""
    # (hardware, config, workload key) -> C -> valid samples, and the sweeps' server facts.
    points: dict[tuple[str, str, str], dict[int, list[LevelResult]]] = {}
    dropped: dict[tuple[str, str, str, int], int] = {}
    facts: dict[tuple[str, str, str], ServerFacts] = {}
    answers: dict[tuple[str, str, str], list[ProbeSet]] = {}  # each launch's, run by run
    skipped: list[str] = []
    probed: dict[EntryKey, int] = {}
    for i, files in enumerate(runs, start=1):
        for run, sweep in ((f, s) for f in files for s in f.sweeps):
            where = (run.hardware, sweep.config, sweep.workload.key())
            facts.setdefault(where, sweep.server)
            answers.setdefault(where, []).extend(_answers(run, sweep.config, sweep.workload))
            per_level = points.setdefault(where, {})
            for c in sorted({lv.max_concurrency for lv in sweep.levels}):
                got, left = valid_samples(sweep.samples(c), sweep.workload, None)
                per_level.setdefault(c, []).extend(_tagged(i, s) for s in got)
                dropped[(*where, c)] = dropped.get((*where, c), 0) + len(left)
    for (hw, config, wl), per_level in sorted(points.items()):
        levels = sorted(per_level)
        by_launch = _by_launch(per_level)
        for c in levels:
            key = EntryKey(hw, config, wl, c)
            samples = per_level[c]
            if not samples:
                skipped.append(f"{config} {wl} C={c}: no valid sample in {len(runs)} runs")
                continue
            server = facts[(hw, config, wl)]
            entry = recorded_entry(
                samples,
                by_launch if can_adjust(levels, c) else None,  # harmless unless a run adjusts
                c,
                store.get(key),
                version=server.version,
                git_commit=git_commit,
                invalid_left_out=dropped.get((hw, config, wl, c), 0),
            )
            sets = _comparable(answers.get((hw, config, wl), []))
            if sets:  # as a recording session stores them: one set per launch that answered
                entry = entry.model_copy(update={"probes": sets})
                probed[key] = len(sets)
            store.queue_update(key, entry, provenance(server, hw, git_commit))
    recording = Recording(flushed=store.flush(delete_unused=False), skipped=skipped,
                          probes=probed)  # fmt: skip
    for key in recording.flushed.created + recording.flushed.updated:
        written = store.get(key, mark_used=False)
        first = next(iter(written.metrics.values()), None) if written is not None else None
        recording.launches[key] = (first.launches or first.n) if first is not None else 0
    return recording


def _answers(run: RunFile, config: str, workload: Workload) -> list[ProbeSet]:
    """The answers ``run``'s launches of ``config`` gave to ``workload``'s probes."""
    return [
        p.answers
        for p in run.probes
        if p.config == config and p.backend == workload.backend
        and p.answers.seed == workload.seed
    ]  # fmt: skip


def _comparable(sets: list[ProbeSet]) -> list[ProbeSet]:
    """The sets that answered the prompts the last run asked (a run with another ``probes``
    or ``probe_tokens`` asked others, which no later run can be judged against)."""
    if not sets:
        return []
    last = sets[-1]
    return [s for s in sets if s.same_prompts(last)]


def _by_launch(per_level: dict[int, list[LevelResult]]) -> dict[str, dict[int, list[LevelResult]]]:
    """{launch: {C: its valid samples}} over all runs (for the launch residuals)."""
    out: dict[str, dict[int, list[LevelResult]]] = {}
    for c, samples in per_level.items():
        for s in samples:
            if s.launch is not None:
                out.setdefault(s.launch, {}).setdefault(c, []).append(s)
    return out
