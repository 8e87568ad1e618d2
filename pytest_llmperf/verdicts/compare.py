"""Per-metric verdicts of a measured point against its baseline entry.

Order of business for one point: validity first (``validity.check_level``; an invalid level
gets no metric verdicts), then each metric through ``stats.decide``, then one sentence per
problem that a reviewer can paste into a PR, with the server's own explanation (queueing at
its running-request cap, accept length, notes) appended as the "why".

Tolerance precedence, most specific first: the test's override (marker / CLI) for that metric,
the test's ``*`` override, the baseline entry's per-metric tolerance, the entry's tolerance,
then the metric's default.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pytest_llmperf.base.metric_defs import METRICS, metric
from pytest_llmperf.base.results import LevelResult, SweepResult, Workload
from pytest_llmperf.verdicts.baseline import BaselineStore
from pytest_llmperf.verdicts.baseline_file import (
    BaselineEntry,
    EntryKey,
    LaunchResidual,
    MetricSummary,
)
from pytest_llmperf.verdicts.launch_adjust import (
    MIN_LEVELS,
    current_residuals,
    decide_adjusted,
    launches_of,
    moved_together,
    pooled_residual_noise,
    prefer_adjusted,
    shared_shift,
)
from pytest_llmperf.verdicts.sequential import BACKSTOP_SHARE, Look
from pytest_llmperf.verdicts.stats import (
    Decision,
    LaunchNoise,
    NoiseRule,
    decide,
    launch_count,
)
from pytest_llmperf.verdicts.tolerance import (
    ToleranceError,
    default_tolerance,
    resolve_tolerance,
    validate_tolerance,
)
from pytest_llmperf.verdicts.validity import ValidityPolicy, check_level
from pytest_llmperf.verdicts.verdict import Verdict, worst

__all__ = [
    "DEFAULT_METRICS",
    "EXIT_UNDECIDED",
    "MetricComparison",
    "PointComparison",
    "ToleranceError",
    "Verdict",
    "compare_metric",
    "compare_point",
    "compare_sweep",
    "default_tolerance",
    "exit_status",
    "explain",
    "fmt_num",
    "resolve_tolerance",
    "validate_tolerance",
    "with_launch_adjustment",
    "worst",
]

# Gated by default when present in the baseline entry; others are compared if recorded.
DEFAULT_METRICS: tuple[str, ...] = (
    "output_throughput",
    "per_request_throughput",
    "median_ttft_ms",
    "median_itl_ms",
    "accept_length",
    # recorded only where they mean something: shared-prefix levels, launched servers
    "cache_hit_rate",
    "startup_s",
)


def fmt_num(v: float | None) -> str:
    """Numbers as people read them in a table: 1571, 84.4, 1.92."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    a = abs(v)
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _tol(x: float) -> str:
    return f"{100 * x:.3g} %"


def explain(level: LevelResult, entry: BaselineEntry | None = None) -> list[str]:
    """The server-side facts that explain a number, every cause it can see: C above the
    running cap (and DP splitting that cap per worker), C above the CUDA-graph capture size
    (eager fallback), accept length below its baseline; then the level's notes."""
    why: list[str] = []
    c = level.max_concurrency
    cap = level.server_max_running_requests
    dp = level.server_dp_size or 1
    if cap is not None and (level.queueing or c > cap):
        why.append(f"server capped running requests at {cap} (C={c} queues)")
    elif level.queueing:
        why.append(f"requests queued at C={c}")
    if cap is not None and dp > 1 and (level.queueing or c > cap or level.speculative):
        per = cap // dp
        why.append(
            f"dp-size {dp} splits the running cap {cap} into {per} per DP worker "
            f"(C={c} is {c / dp:g} per worker)"
        )
    # each DP worker runs its own batch against its own captured graphs
    running = math.ceil((min(c, cap) if cap is not None else c) / dp)
    bs = level.server_cuda_graph_max_bs
    if bs is not None and running > bs:
        each = " per DP worker" if dp > 1 else ""
        why.append(
            f"{running} running requests{each} exceed the CUDA-graph capture size {bs} "
            "(cuda_graph_max_bs): larger batches fall back to eager decoding"
        )
    if level.accept_length is not None:
        base = entry.metrics.get("accept_length") if entry is not None else None
        if (
            base is not None
            and base.mean
            and level.accept_length
            < base.mean * (1 - resolve_tolerance("accept_length", entry=entry))
        ):
            why.append(
                f"accept length {level.accept_length:.2f} is below its baseline "
                f"{base.mean:.2f} (the draft model accepts fewer tokens per verify step)"
            )
        else:
            why.append(f"accept length {level.accept_length:.2f}")
    why.extend(n for n in level.notes if n not in why)
    return why


@dataclass(frozen=True)
class MetricComparison:
    """One metric at one point: numbers, decision, verdict and the sentence for the PR."""

    metric: str
    unit: str
    current: float
    n_current: int
    baseline: float
    decision: Decision
    verdict: Verdict
    message: str
    adjusted: bool = False  # the decision is on launch-adjusted residuals (launch_adjust)
    # the change with each launch's speed removed, when the residuals were judged
    adjusted_change: float | None = None

    @property
    def change(self) -> float:
        """Signed relative change (cur - base) / base."""
        return (self.current - self.baseline) / self.baseline if self.baseline else 0.0

    @property
    def stale(self) -> bool:
        return self.decision.stale


@dataclass
class PointComparison:
    """All metrics of one (config, workload, C) point and the point's overall verdict."""

    config: str
    concurrency: int
    workload: str
    verdict: Verdict
    metrics: list[MetricComparison] = field(default_factory=list)
    invalid_reasons: list[str] = field(default_factory=list)
    why: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    attached: bool = False  # measured on an attached server: never relaunched
    # what it was judged against: "baseline", or "history" (the drift rule, run/history_checks)
    reference: str = "baseline"

    @property
    def rerun(self) -> bool:
        """Re-measure this point (and pass all samples to ``compare_point`` again). Against its
        history an inconclusive point waits for the next run: more samples of this one cannot
        lengthen a short history or tell a first bad run from the second."""
        return self.verdict == Verdict.INCONCLUSIVE and self.reference == "baseline"

    @property
    def stale(self) -> list[MetricComparison]:
        return [m for m in self.metrics if m.stale]

    @property
    def needs_launches(self) -> bool:
        """Every inconclusive metric is unresolvable: its measured launch-to-launch noise alone
        puts the margin above the tolerance, which only more launches can narrow."""
        open_ = [m.decision for m in self.metrics if m.decision.outcome == Verdict.INCONCLUSIVE]
        return bool(open_) and all(not d.resolved for d in open_)

    def metric(self, name: str) -> MetricComparison | None:
        return next((m for m in self.metrics if m.metric == name), None)

    def message(self) -> str:
        return "\n".join(self.messages)


def compare_metric(
    name: str,
    current: float | Sequence[float],
    baseline: MetricSummary,
    tolerance: float,
    *,
    config: str = "",
    concurrency: int | None = None,
    why: Sequence[str] = (),
    rule: NoiseRule | None = None,
    launches: Sequence[str | None] | None = None,
    within_se: Sequence[float | None] = (),
    t_margin: bool = False,
    attached: bool = False,
    look: Look | None = None,
) -> MetricComparison:
    """Judge one metric; the message is a sentence naming where, by how much and why.

    ``launches``/``within_se``: each current sample's server launch and within-run error;
    ``attached``: the server is never relaunched (its advice says what can be done)."""
    d = metric(name)
    tolerance = validate_tolerance(tolerance, f"tolerance for {name}")
    samples = [float(current)] if isinstance(current, int | float) else [float(v) for v in current]
    dec = decide(
        samples,
        base_mean=baseline.mean,
        base_std=baseline.std,
        base_n=baseline.n,
        base_samples=baseline.samples,
        tolerance=tolerance,
        direction=d.direction,
        rule=rule,
        current_launches=launches,
        current_within_se=within_se,
        base_launches=baseline.launches,
        base_within_se=baseline.within_se,
        t_margin=t_margin,
        look=look,
    )
    cur = statistics.fmean(samples)
    within_slack = d.slack > 0 and abs(cur - baseline.mean) <= d.slack
    if within_slack and dec.outcome != Verdict.PASS:
        dec = dataclasses.replace(dec, outcome=Verdict.PASS, stale=False)
    verdict = dec.outcome
    where = " ".join(p for p in (config, "" if concurrency is None else f"at C={concurrency}") if p)
    unit = f" {d.unit}" if d.unit else ""
    k = dec.n_launches_current or len(samples)
    of_n = ""
    if len(samples) > 1:
        of_n = f" (mean of {len(samples)}" + (f", {k} launches)" if k != len(samples) else ")")
    ch = (cur - baseline.mean) / baseline.mean if baseline.mean else 0.0
    side = "below" if ch < 0 else "above"
    msg = (
        f"{where + ': ' if where else ''}{name} {fmt_num(cur)}{unit}{of_n} is {_pct(abs(ch))} "
        f"{side} baseline {fmt_num(baseline.mean)}{unit} (tolerance {_tol(tolerance)}"
        + (f", changes within {fmt_num(d.slack)}{unit} pass)" if within_slack else ")")
    )
    if verdict == Verdict.INCONCLUSIVE:
        msg += f"; {dec.advice(attached=attached)}"
    elif dec.stale:
        msg += "; better than baseline beyond noise: the baseline is stale, re-record it with "
        msg += "--llmperf-update"
    if why and verdict != Verdict.PASS:
        msg += "; " + "; ".join(why)
    return MetricComparison(
        metric=name,
        unit=d.unit,
        current=cur,
        n_current=len(samples),
        baseline=baseline.mean,
        decision=dec,
        verdict=verdict,
        message=msg,
    )


def with_launch_adjustment(
    mc: MetricComparison,
    residuals: Sequence[float],
    base: LaunchResidual,
    tolerance: float,
    rule: NoiseRule | None = None,
    why: Sequence[str] = (),
    within_se: Sequence[float | None] = (),
    look: Look | None = None,
    reason: str = "",
    noise: LaunchNoise | None = None,
) -> MetricComparison:
    """Judge the launch-adjusted residuals too, and combine: FAIL when either side fails beyond
    its noise (the plain one sees uniform regressions, the adjusted one a level's own),
    PASS when the adjusted one passes, else INCONCLUSIVE. ``look``: the sequential rule's
    look for the adjusted side; ``reason``: why the adjusted comparison was chosen."""
    adj = decide_adjusted(mc.metric, residuals, base, tolerance, rule, within_se, look, noise)
    ch = math.exp(statistics.fmean(residuals) - base.mean) - 1
    side = "below" if ch < 0 else "above"
    launches = f"{len(residuals)} launch{'es' if len(residuals) != 1 else ''}"
    adj_text = (
        f"{_pct(abs(ch))} {side} baseline with each launch's speed removed (over {launches}, "
        f"noise margin {_pct(adj.margin)})"
    )
    if mc.verdict == Verdict.FAIL or adj.outcome == Verdict.FAIL:
        verdict = Verdict.FAIL
    elif adj.outcome == Verdict.PASS:
        verdict = Verdict.PASS
    else:
        verdict = Verdict.INCONCLUSIVE
    head = mc.message.partition(" (tolerance ")[0]
    msg = f"{head} (tolerance {_tol(tolerance)}); launch-adjusted{reason}: {adj_text}"
    if verdict == Verdict.FAIL and adj.outcome != Verdict.FAIL:
        msg += "; the plain difference alone is beyond the launch noise"
        # What the backstop saw may be the launches' shared speed (the level's plain change
        # less its residual's): every level moved alike, so the cause is the box or a change
        # of every level, not this level's own.
        shared = (
            math.expm1(shared_shift(mc.current, mc.baseline, residuals, base.mean))
            if mc.current > 0 and mc.baseline > 0
            else 0.0
        )
        if abs(shared) > tolerance:
            msg += (
                f" (every level of this run moved {100 * shared:+.0f} % together "
                "against the recording: the box, or a change of every level alike, which the "
                "launch-adjusted comparison removes)"
            )
    elif verdict == Verdict.INCONCLUSIVE:
        effect = noise is not None and noise.launch_effect
        msg += f"; {adj.advice(adjusted=True, launch_effect=effect)}"
    if why and verdict != Verdict.PASS:
        msg += "; " + "; ".join(why)
    decision = adj if verdict != Verdict.FAIL or adj.outcome == Verdict.FAIL else mc.decision
    return dataclasses.replace(
        mc,
        decision=decision,
        verdict=verdict,
        message=msg,
        adjusted=decision is adj,
        adjusted_change=ch,
    )


def compare_point(
    config: str,
    levels: LevelResult | Sequence[LevelResult],
    entry: BaselineEntry | None,
    *,
    workload: Workload | None = None,
    metrics: Sequence[str] | None = None,
    tolerances: Mapping[str, float] | float | None = None,
    rule: NoiseRule | None = None,
    policy: ValidityPolicy | None = None,
    adjusted: Mapping[str, Sequence[float]] | None = None,
    attached: bool = False,
    adjust: str = "both",
    looks: int | None = None,
    residual_noise: Mapping[str, LaunchNoise] | None = None,
) -> PointComparison:
    """Validity, then every metric of ``metrics`` (default: ``DEFAULT_METRICS`` ∩ entry).

    ``levels`` may be several repeats of the same point; each must be valid to be used, and
    the point is INVALID if none is. ``adjusted``: this point's launch residuals per metric
    (``launch_adjust``), judged beside the plain comparison where the entry has them
    (``adjust="auto"``: only where ``prefer_adjusted`` says that is the sharper comparison).
    ``looks``: judge by the sequential rule with this many looks (the launch budget), each
    metric at the look of the launches its samples came from; ``residual_noise``: per metric,
    the residual spread pooled over the sweep's levels (``pooled_residual_noise``) for them.
    """
    reps = [levels] if isinstance(levels, LevelResult) else list(levels)
    if not reps:
        raise ValueError("compare_point() needs at least one LevelResult")
    c = reps[0].max_concurrency
    wl_key = workload.key() if workload is not None else ""
    why = explain(reps[-1], entry)
    point = PointComparison(
        config=config,
        concurrency=c,
        workload=wl_key,
        verdict=Verdict.PASS,
        why=why,
        attached=attached,
    )

    valid: list[LevelResult] = []
    for lv in reps:
        reasons = check_level(lv, workload, policy)
        if reasons:
            point.invalid_reasons.extend(r for r in reasons if r not in point.invalid_reasons)
        else:
            valid.append(lv)
    if not valid:
        point.verdict = Verdict.INVALID
        point.messages.append(
            f"{config} at C={c}: invalid measurement: " + "; ".join(point.invalid_reasons)
        )
        return point
    if entry is None:
        point.verdict = Verdict.MISSING
        point.messages.append(
            f"{config} at C={c}: no baseline entry for workload {wl_key or '?'}; record one "
            "with --llmperf-update"
        )
        return point

    names = list(metrics) if metrics is not None else list(DEFAULT_METRICS)
    for name in names:
        if name not in METRICS:
            metric(name)  # raises with the list of known names
        summary = entry.metrics.get(name)
        got = [(v, lv) for lv in valid if (v := lv.judged_value(name)) is not None]
        values = [v for v, _ in got]
        if summary is None or not values:
            if metrics is not None and summary is None:
                point.messages.append(
                    f"{config} at C={c}: {name} has no baseline value; record one with "
                    "--llmperf-update"
                )
                point.metrics.append(_missing_metric(name))
            continue
        tol = resolve_tolerance(name, test=tolerances, entry=entry)
        res = summary.launch_residual
        have = bool(adjusted and adjusted.get(name)) and res is not None
        ratio: float | None = None
        adjusting = have
        moved: float | None = None
        if have and adjust == "auto":
            adjusting, ratio = prefer_adjusted(summary)
            if not adjusting and adjusted is not None:
                moved = moved_together(values, summary, adjusted[name], tol)
                adjusting = moved is not None
        plain_look = None
        if looks is not None:
            k = launch_count([lv.launch for _, lv in got], len(values))
            plain_look = Look(k, looks)
            # Adjusting, the plain side is a fail-only backstop spending a small share.
            plain_look = plain_look.share(BACKSTOP_SHARE) if adjusting else plain_look
        mc = compare_metric(
            name,
            values,
            summary,
            tol,
            config=config,
            concurrency=c,
            why=why,
            rule=rule,
            launches=[lv.launch for _, lv in got],
            within_se=[lv.within_se.get(name) for _, lv in got],
            t_margin=adjusting,  # the unadjusted side is then a backstop for gross changes
            attached=attached,
            look=plain_look,
        )
        if adjusting and adjusted is not None and res is not None:
            adj_look = None
            if looks is not None:
                adj_look = Look(len(adjusted[name]), looks).share(1 - BACKSTOP_SHARE)
            reason = ""
            if moved is not None:
                reason = (
                    f" (every level of this run moved {100 * moved:+.0f} % together, beyond "
                    "the launch noise the baseline recorded: the plain comparison would "
                    "measure that move, not the level)"
                )
            elif ratio is not None and math.isinf(ratio):
                reason = (
                    " (the launch's shared speed removed, as the baseline's launches differed "
                    "by it alone)"
                )
            elif ratio is not None:
                reason = (
                    f" (the launch's shared speed removed, as its noise is {ratio:.1f}x the "
                    "within-launch noise)"
                )
            mc = with_launch_adjustment(
                mc,
                adjusted[name],
                res,
                tol,
                rule,
                why,
                within_se=[lv.within_se.get(name) for _, lv in got],
                look=adj_look,
                reason=reason,
                noise=(residual_noise or {}).get(name) if looks is not None else None,
            )
        point.metrics.append(mc)
        if mc.verdict != Verdict.PASS or mc.stale:
            point.messages.append(mc.message)
    point.verdict = worst(m.verdict for m in point.metrics)
    return point


def _missing_metric(name: str) -> MetricComparison:
    d = METRICS[name]
    nan = math.nan
    dec = Decision(Verdict.PASS, False, nan, nan, nan, nan, "margin", 0, 0)
    return MetricComparison(name, d.unit, nan, 0, nan, dec, Verdict.MISSING, "")


def compare_sweep(
    sweep: SweepResult,
    store: BaselineStore,
    hardware: str,
    *,
    metrics: Sequence[str] | None = None,
    tolerances: Mapping[str, float] | float | None = None,
    rule: NoiseRule | None = None,
    policy: ValidityPolicy | None = None,
    adjust: str = "none",
    concurrencies: Collection[int] | None = None,
    looks: int | None = None,
) -> list[PointComparison]:
    """Every level of a sweep (or those in ``concurrencies``) against the store, each on all
    of its samples (``repeats`` included), exactly as the plugin's point check judges it
    (``llmperf compare``); with ``adjust = "launch"``, launch-adjusted as well (samples grouped
    by their launch, over the whole sweep); ``"auto"``, launch-adjusted per metric where
    ``prefer_adjusted`` says so, as the plugin chooses. ``looks``: the sequential rule with
    that launch budget (the residual noise pooled over the sweep's recorded levels)."""
    out = []
    wl = sweep.workload.key()
    adjusting = adjust in ("launch", "auto") and len(sweep.levels) >= MIN_LEVELS
    launches = launches_of(sweep) if adjusting else {}

    def entry_for(c: int) -> BaselineEntry | None:
        return store.get(EntryKey(hardware, sweep.config, wl, c), mark_used=False)

    names = list(metrics) if metrics is not None else list(DEFAULT_METRICS)
    pooled: dict[str, LaunchNoise] = {}
    if looks is not None and launches:
        entries = [entry_for(lv.max_concurrency) for lv in sweep.levels]
        for name in names:
            noise = pooled_residual_noise(entries, name)
            if noise is not None:
                pooled[name] = noise

    for lv in sorted(sweep.levels, key=lambda lv: lv.max_concurrency):
        c = lv.max_concurrency
        if concurrencies is not None and c not in concurrencies:
            continue
        adjusted = current_residuals(launches, entry_for, c, names) if launches else None
        entry = store.get(EntryKey(hardware, sweep.config, wl, lv.max_concurrency))
        out.append(
            compare_point(
                sweep.config,
                sweep.samples(lv.max_concurrency),
                entry,
                workload=sweep.workload,
                metrics=metrics,
                tolerances=tolerances,
                rule=rule,
                policy=policy,
                adjusted=adjusted,
                attached=sweep.server.mode == "attached",
                adjust="auto" if adjust == "auto" else "both",
                looks=looks,
                residual_noise=pooled or None,
            )
        )
    return out


# The session's exit status when a check stayed undecided under ``undecided = "exit"`` and
# nothing failed: pytest itself uses 0-5, ``git bisect run`` reads 125 as "skip this commit".
EXIT_UNDECIDED = 6


def exit_status(
    verdicts: Iterable[Verdict], *, undecided: str = "warn", fail_inconclusive: bool = False
) -> int:
    """1 when any point failed, was invalid or had no baseline; an inconclusive one by
    ``undecided``: "warn" 0, "fail" 1, "exit" ``EXIT_UNDECIDED`` (``fail_inconclusive`` is
    the older spelling of "fail")."""
    if fail_inconclusive:
        undecided = "fail"
    verdicts = list(verdicts)
    if any(v in (Verdict.FAIL, Verdict.INVALID, Verdict.MISSING) for v in verdicts):
        return 1
    if Verdict.INCONCLUSIVE in verdicts:
        return {"fail": 1, "exit": EXIT_UNDECIDED}.get(undecided, 0)
    return 0
