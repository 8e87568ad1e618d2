"""The noise-aware decision rule: is a change beyond tolerance *and* unlikely to be noise?

Notation (all relative to the baseline mean, oriented so that positive means *worse*):

* ``d``   deficit of the current mean: ``(base - cur) / base`` for higher-is-better metrics,
  ``(cur - base) / base`` for lower-is-better ones.
* ``tol`` the tolerance (a fraction, 0 < tol < 1).
* ``σ``   the run-to-run relative noise of *one* run: pooled from the baseline's recorded
  spread (``std/mean`` over its ``n`` repeats) and the current repeats; when neither has two
  samples it is ``assumed_noise`` (2 %); it never goes below ``noise_floor`` (0.5 %), because
  two nearly equal samples say little about the noise.
* ``se = σ·√(1/n_cur + 1/n_base)`` the standard error of ``d``; ``margin = z·se`` (z = 2).

Rule (small samples, the usual case):

* **fail**          ``d > tol + margin``: beyond the tolerance even after giving noise its due;
* **inconclusive**  ``tol < d ≤ tol + margin``: beyond the tolerance but possibly noise. The
  caller should re-run the point and call again with all samples (``rerun`` is set, and
  ``repeats_needed`` says how many current samples would settle it);
* **pass**          ``d ≤ tol``;
* **stale** (a warning on a pass) when the metric *improved* by more than ``tol + margin``:
  the baseline no longer describes the server; re-record it.

With raw samples on both sides (≥ 5 each) the rule is asv's "big enough AND significant":
fail when ``d > tol`` and a one-sided Mann-Whitney U test says the current samples lie beyond
the tolerance line (baseline samples scaled by ``1 ∓ tol``) with p < 0.01; inconclusive when
``d > tol`` but p ≥ 0.01.

False-alarm arithmetic (Gaussian noise, no real change, σ known): ``d ~ N(0, se)`` so
``P(fail) = 1 - Φ(tol/se + z)``. One run against a one-run baseline (se = σ√2):

* σ = 3 %, tol = 5 %: ``1 - Φ(1.18 + 2) = 0.07 %`` per comparison (≈ 1.8 % for a sweep of 6
  levels × 4 metrics if independent); P(inconclusive) = Φ(3.18) - Φ(1.18) ≈ 12 %, each costing
  one re-run, not a red build.
* σ = 3 %, tol = 5 %, baseline of 3 repeats (se = σ·√(4/3) = 3.5 %): ``1 - Φ(1.44 + 2)`` =
  0.03 %. The plain tolerance rule (fail when ``d > tol``) would fail 12 % of comparisons.

Detection: a real deficit Δ fails with probability ``Φ((Δ - tol - margin)/se)``; a 10 % drop
at σ = 1.7 % (uniform ±3 % jitter) and a 3-repeat baseline is caught on the first run about
70 % of the time and after two re-runs (n_cur = 3) about 94 % of the time. Make σ small (quiet
hardware, more requests per level) or n large (``repeats``) to catch changes close to ``tol``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pytest_llmperf.base.metric_defs import Direction

__all__ = ["Decision", "NoiseRule", "decide", "deficit", "relative_change"]

Outcome = Literal["pass", "fail", "inconclusive"]
MAX_SUGGESTED_REPEATS = 20


@dataclass(frozen=True)
class NoiseRule:
    """Knobs of the rule; the defaults are what the false-alarm arithmetic above assumes."""

    z: float = 2.0
    assumed_noise: float = 0.02
    noise_floor: float = 0.005
    mw_min_samples: int = 5
    mw_alpha: float = 0.01

    def __post_init__(self) -> None:
        if self.z < 0 or self.assumed_noise < 0 or self.noise_floor < 0:
            raise ValueError("NoiseRule: z, assumed_noise and noise_floor must be >= 0")
        if not 0 < self.mw_alpha < 1:
            raise ValueError("NoiseRule: mw_alpha must be in (0, 1)")


@dataclass(frozen=True)
class Decision:
    """The outcome plus every number that produced it (for messages and JUnit properties)."""

    outcome: Outcome
    stale: bool
    deficit: float  # relative, positive = worse
    tolerance: float
    noise: float  # σ used, relative
    margin: float  # z·se, relative (0 for the Mann-Whitney path)
    method: Literal["margin", "mann-whitney"]
    n_current: int
    n_baseline: int
    p_value: float | None = None
    noise_assumed: bool = False
    repeats_needed: int | None = None

    @property
    def rerun(self) -> bool:
        """Inconclusive points should be measured again and decided on all samples."""
        return self.outcome == "inconclusive"

    def advice(self) -> str:
        if self.outcome != "inconclusive":
            return ""
        if self.repeats_needed is not None:
            return (
                f"inconclusive (within noise margin {100 * self.margin:.1f} %): re-run to "
                f"n={self.repeats_needed} samples"
            )
        return (
            f"inconclusive (within noise margin {100 * self.margin:.1f} %): re-run, or "
            "re-record the baseline with more repeats"
        )


def relative_change(current: float, base: float) -> float:
    """Signed ``(cur - base) / |base|``; a zero baseline gives 0 (equal) or ±inf."""
    if base == 0:
        return 0.0 if current == 0 else math.copysign(math.inf, current)
    return (current - base) / abs(base)


def deficit(current: float, base: float, direction: Direction) -> float:
    """How much worse ``current`` is than ``base`` as a fraction (negative = better)."""
    ch = relative_change(current, base)
    return -ch if direction == "higher" else ch


def _pooled_noise(
    current: Sequence[float],
    base_mean: float,
    base_std: float,
    base_n: int,
) -> tuple[float | None, int]:
    """Pooled relative std of one run, and its degrees of freedom (None with 0 dof)."""
    scale = abs(base_mean) or 1.0
    ss = 0.0
    dof = 0
    if base_n >= 2:
        ss += (base_n - 1) * (base_std / scale) ** 2
        dof += base_n - 1
    if len(current) >= 2:
        ss += (len(current) - 1) * (statistics.stdev(current) / scale) ** 2
        dof += len(current) - 1
    if dof == 0:
        return None, 0
    return math.sqrt(ss / dof), dof


def _mann_whitney(
    current: Sequence[float],
    base_samples: Sequence[float],
    tolerance: float,
    direction: Direction,
    *,
    worse: bool,
) -> float:
    """One-sided p that ``current`` lies beyond the tolerance line (worse or better side)."""
    from scipy.stats import mannwhitneyu  # scipy import is slow; only this path needs it

    if worse:
        factor = 1 - tolerance if direction == "higher" else 1 + tolerance
        alt = "less" if direction == "higher" else "greater"
    else:
        factor = 1 + tolerance if direction == "higher" else 1 - tolerance
        alt = "greater" if direction == "higher" else "less"
    line = [v * factor for v in base_samples]
    return float(mannwhitneyu(list(current), line, alternative=alt).pvalue)


def decide(
    current: Sequence[float] | float,
    *,
    base_mean: float,
    base_std: float = 0.0,
    base_n: int = 1,
    base_samples: Sequence[float] | None = None,
    tolerance: float,
    direction: Direction,
    rule: NoiseRule | None = None,
) -> Decision:
    """Apply the rule in the module docstring to one metric at one point."""
    rule = rule or NoiseRule()
    cur = [float(current)] if isinstance(current, int | float) else [float(v) for v in current]
    if not cur:
        raise ValueError("decide() needs at least one current sample")
    if not 0 < tolerance < 1:
        raise ValueError(f"tolerance must be a fraction with 0 < tol < 1, got {tolerance!r}")
    n_c = len(cur)
    d = deficit(statistics.fmean(cur), base_mean, direction)
    pooled, _ = _pooled_noise(cur, base_mean, base_std, base_n)
    assumed = pooled is None
    sigma = max(rule.assumed_noise if pooled is None else pooled, rule.noise_floor)

    if (
        base_samples is not None
        and len(base_samples) >= rule.mw_min_samples
        and n_c >= rule.mw_min_samples
    ):
        p_worse = _mann_whitney(cur, base_samples, tolerance, direction, worse=True)
        p_better = _mann_whitney(cur, base_samples, tolerance, direction, worse=False)
        if d > tolerance:
            outcome: Outcome = "fail" if p_worse < rule.mw_alpha else "inconclusive"
        else:
            outcome = "pass"
        stale = -d > tolerance and p_better < rule.mw_alpha
        return Decision(
            outcome=outcome,
            stale=stale,
            deficit=d,
            tolerance=tolerance,
            noise=sigma,
            margin=0.0,
            method="mann-whitney",
            n_current=n_c,
            n_baseline=len(base_samples),
            p_value=p_worse,
            noise_assumed=assumed,
            repeats_needed=min(2 * n_c, MAX_SUGGESTED_REPEATS) if outcome != "pass" else None,
        )

    n_b = max(base_n, 1)
    margin = rule.z * sigma * math.sqrt(1 / n_c + 1 / n_b)
    if d > tolerance + margin:
        outcome = "fail"
    elif d > tolerance:
        outcome = "inconclusive"
    else:
        outcome = "pass"
    needed = None
    if outcome == "inconclusive":
        # Smallest n_cur whose margin would make today's deficit decisive, if any exists.
        for n in range(n_c + 1, MAX_SUGGESTED_REPEATS + 1):
            if rule.z * sigma * math.sqrt(1 / n + 1 / n_b) < d - tolerance:
                needed = n
                break
    return Decision(
        outcome=outcome,
        stale=-d > tolerance + margin,
        deficit=d,
        tolerance=tolerance,
        noise=sigma,
        margin=margin,
        method="margin",
        n_current=n_c,
        n_baseline=n_b,
        noise_assumed=assumed,
        repeats_needed=needed,
    )
