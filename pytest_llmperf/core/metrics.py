"""Pure functions: per-request records -> one level's metrics, with bench_serving's definitions.

Definitions (``metric_defs.py`` holds the user-facing wording):
- throughputs divide sums over *successful* requests by the level duration (first send to
  last completion); failed requests contribute no tokens;
- TTFT, E2E and TPOT are per request, TPOT = (e2e - ttft) / (output_tokens - 1);
- ITL is pooled over every gap of every request, a multi-token event's gap split evenly;
- per_request_throughput = mean over requests of (output_tokens - 1) / (e2e - ttft);
- concurrency = sum of e2e latencies / duration (achieved, not the target C).

Beside them, the numbers verdicts judge: the steady-state window (C requests in
flight, ramp-up and drain cut off, ``steady_window``) and each judged metric's within-run
relative standard error (``within_run_se``): batch means over the window for throughput,
request-to-request spread for per-request metrics. They measure this run's own noise instead
of assuming one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from pytest_llmperf.base.results import LevelResult, RequestDetails, SteadyState
from pytest_llmperf.core.records import RequestRecord
from pytest_llmperf.core.slo import Slo, goodput

MAX_DISTINCT_ERRORS = 10
STEADY_BATCHES = 8  # batch means over the window: enough dof, batches long enough to average
MIN_WINDOW_TOKENS = 64  # fewer tokens in the window: no steady-state statistic
MEDIAN_SE_FACTOR = math.sqrt(math.pi / 2)  # se(median) ~ 1.2533 sd / sqrt(n), normal data


def summarize_ms(values_s: Sequence[float] | np.ndarray) -> dict[str, float | None]:
    """mean/median/p90/p99 in milliseconds (numpy's linear percentiles, as bench_serving)."""
    arr = np.asarray(values_s, dtype=float)
    if arr.size == 0:
        return {"mean": None, "median": None, "p90": None, "p99": None}
    ms = arr * 1e3
    p50, p90, p99 = np.percentile(ms, [50, 90, 99])
    return {"mean": float(ms.mean()), "median": float(p50), "p90": float(p90), "p99": float(p99)}


def level_duration(records: Iterable[RequestRecord]) -> float:
    """First send to last completion, over all requests (failed ones took time too)."""
    starts, ends = [], []
    for r in records:
        if math.isnan(r.t_send):
            continue
        starts.append(r.t_send)
        ends.append(r.t_send + (0.0 if math.isnan(r.e2e) else r.e2e))
    return max(ends) - min(starts) if starts else 0.0


def distinct_errors(records: Iterable[RequestRecord], cap: int = MAX_DISTINCT_ERRORS) -> list[str]:
    """Distinct error messages with their counts, most frequent first, at most ``cap``."""
    counts: dict[str, int] = {}
    for r in records:
        if r.error is not None:
            counts[r.error] = counts.get(r.error, 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    out = [f"{n}x {msg}" if n > 1 else msg for msg, n in ranked[:cap]]
    if len(ranked) > cap:
        out.append(f"... and {len(ranked) - cap} more distinct errors")
    return out


def steady_window(records: Sequence[RequestRecord], concurrency: int) -> tuple[float, float] | None:
    """(start, end) of the stretch with ``concurrency`` requests in flight, absolute times.

    Start: the C-th send (all C slots busy). End: the first completion at or after the last
    send (from then on, finished requests are not replaced). None when the level never had C
    in flight (fewer requests than C) or the window is empty.
    """
    done = [r for r in records if not math.isnan(r.t_send) and not math.isnan(r.e2e)]
    if concurrency < 1 or len(done) < concurrency:
        return None
    sends = sorted(r.t_send for r in done)
    start, last_send = sends[concurrency - 1], sends[-1]
    ends = [r.t_send + r.e2e for r in done if r.t_send + r.e2e >= last_send]
    end = min(ends) if ends else last_send
    return (start, end) if end > start else None


def _window_tokens(records: Sequence[RequestRecord], t0: float, t1: float) -> np.ndarray:
    times = [np.frombuffer(r.token_times, dtype=float) for r in records if r.ok and r.token_times]
    if not times:
        return np.empty(0)
    allt = np.concatenate(times)
    return allt[(allt >= t0) & (allt <= t1)]


def steady_state(
    records: Sequence[RequestRecord], concurrency: int, first_send: float
) -> tuple[SteadyState | None, float | None]:
    """The steady-state window's throughput, and its relative standard error by batch means
    (None when the window holds too few tokens to judge)."""
    win = steady_window(records, concurrency)
    if win is None:
        return None, None
    t0, t1 = win
    toks = _window_tokens(records, t0, t1)
    if toks.size < MIN_WINDOW_TOKENS:
        return None, None
    span = t1 - t0
    steady = SteadyState(
        start_s=t0 - first_send,
        window_s=span,
        output_tokens=int(toks.size),
        output_throughput=float(toks.size / span),
    )
    counts = np.histogram(toks, bins=STEADY_BATCHES, range=(t0, t1))[0].astype(float)
    mean = counts.mean()
    se = float(counts.std(ddof=1) / math.sqrt(STEADY_BATCHES) / mean) if mean > 0 else None
    return steady, se


def _rel_se_mean(values: Sequence[float]) -> float | None:
    if len(values) < 2:
        return None
    m = float(np.mean(values))
    return float(np.std(values, ddof=1) / math.sqrt(len(values)) / abs(m)) if m else None


def _rel_se_median(values: Sequence[float]) -> float | None:
    if len(values) < 2:
        return None
    med = float(np.median(values))
    sd = float(np.std(values, ddof=1))
    return MEDIAN_SE_FACTOR * sd / math.sqrt(len(values)) / abs(med) if med else None


def within_run_se(
    records: Sequence[RequestRecord], throughput_se: float | None
) -> dict[str, float]:
    """Relative standard error of each judged metric from this level's own data.

    Throughput: batch means over the steady window (``throughput_se``). Per-request metrics:
    their spread over requests (ITL through each request's median gap, so one request's
    thousand gaps count once). These see within-run noise only; per-launch speed needs
    re-runs in fresh launches (``run/perfrun.py``).
    """
    ok = [r for r in records if r.ok]
    out: dict[str, float | None] = {
        "output_throughput": throughput_se,
        "per_request_throughput": _rel_se_mean(
            [
                (r.output_tokens - 1) / (r.e2e - r.ttft)
                for r in ok
                if r.output_tokens > 1 and r.e2e > r.ttft
            ]
        ),
        "median_ttft_ms": _rel_se_median([r.ttft for r in ok if not math.isnan(r.ttft)]),
        "median_itl_ms": _rel_se_median([float(np.median(g)) for r in ok if (g := r.itls())]),
    }
    return {k: v for k, v in out.items() if v is not None and math.isfinite(v)}


def compute_level(
    records: Sequence[RequestRecord],
    *,
    max_concurrency: int,
    duration: float | None = None,
    details: bool = False,
    slo: Slo | None = None,
) -> LevelResult:
    """Aggregate one level's records into a ``LevelResult`` (no server facts, no notes).

    With an ``slo`` that has per-request limits, ``goodput`` is filled in (``slo.goodput``).
    """
    dur = level_duration(records) if duration is None else duration
    ok = [r for r in records if r.ok]
    in_tok = sum(r.prompt_tokens for r in ok)
    out_tok = sum(r.output_tokens for r in ok)
    per_req = [
        (r.output_tokens - 1) / (r.e2e - r.ttft)
        for r in ok
        if r.output_tokens > 1 and r.e2e > r.ttft
    ]
    tpots = [t for r in ok if (t := r.tpot()) is not None]
    itls: list[float] = []
    for r in ok:
        itls.extend(r.itls())
    ttft = summarize_ms([r.ttft for r in ok if not math.isnan(r.ttft)])
    itl = summarize_ms(itls)
    tpot = summarize_ms(tpots)
    e2e = summarize_ms([r.e2e for r in ok])
    rate = (lambda x: x / dur) if dur > 0 else (lambda x: 0.0)
    lags = [r.schedule_lag for r in records if r.t_scheduled is not None]
    result = LevelResult(
        max_concurrency=max_concurrency,
        num_requests=len(records),
        completed=len(ok),
        failed=len(records) - len(ok),
        duration=dur,
        total_input_tokens=in_tok,
        total_output_tokens=out_tok,
        total_cached_tokens=sum(r.cached_tokens for r in ok),
        request_throughput=rate(len(ok)),
        input_throughput=rate(in_tok),
        output_throughput=rate(out_tok),
        total_throughput=rate(in_tok + out_tok),
        per_request_throughput=float(np.mean(per_req)) if per_req else 0.0,
        concurrency=rate(sum(r.e2e for r in ok)),
        mean_ttft_ms=ttft["mean"],
        median_ttft_ms=ttft["median"],
        p90_ttft_ms=ttft["p90"],
        p99_ttft_ms=ttft["p99"],
        mean_itl_ms=itl["mean"],
        median_itl_ms=itl["median"],
        p90_itl_ms=itl["p90"],
        p99_itl_ms=itl["p99"],
        mean_tpot_ms=tpot["mean"],
        median_tpot_ms=tpot["median"],
        p90_tpot_ms=tpot["p90"],
        p99_tpot_ms=tpot["p99"],
        mean_e2e_latency_ms=e2e["mean"],
        median_e2e_latency_ms=e2e["median"],
        p90_e2e_latency_ms=e2e["p90"],
        p99_e2e_latency_ms=e2e["p99"],
        errors=distinct_errors(records),
        schedule_lag_p99_ms=summarize_ms(lags)["p99"] if lags else None,
        goodput=goodput(records, slo, dur) if slo and slo.has_request_limits else None,
        connection_retries=sum(r.retries for r in records),
        coalesced_itl_share=(sum(r.coalesced_gaps for r in ok) / len(itls) if itls else None),
    )
    sent = [r.t_send for r in records if not math.isnan(r.t_send)]
    if sent and workload_closed_loop(records):
        result.steady, thr_se = steady_state(records, max_concurrency, min(sent))
    else:
        thr_se = None
    result.within_se = within_run_se(records, thr_se)
    if details:
        result.details = request_details(records)
    return result


def workload_closed_loop(records: Sequence[RequestRecord]) -> bool:
    """Open-loop levels (scheduled arrivals) have no fixed C in flight: no steady window."""
    return all(r.t_scheduled is None for r in records)


def request_details(records: Sequence[RequestRecord]) -> RequestDetails:
    """Per-request columns (bench_serving's ``--output-details`` shape)."""
    return RequestDetails(
        input_lens=[r.prompt_tokens for r in records],
        output_lens=[r.output_tokens if r.ok else 0 for r in records],
        ttfts=[r.ttft if r.ok else math.nan for r in records],
        e2e_latencies=[r.e2e for r in records],
        errors=[r.error for r in records],
    )
