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
  With ``t_margin`` (the unadjusted side of a launch-adjusted verdict, where σ is a large
  launch noise measured from a few launches and so itself uncertain) a measured σ gets
  Student's t at the same one-sided level (97.7 %) with the pooled degrees of freedom
  (``critical``): 4.5 for a 3-launch baseline against one launch, 2.3 at 20 dof. A baseline
  whose three launches happened to land close together would otherwise give every later run a
  margin far too narrow for its real launch noise.

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

from scipy import stats as _scipy_stats

from pytest_llmperf.base.metric_defs import Direction
from pytest_llmperf.verdicts.sequential import DETECT, Look
from pytest_llmperf.verdicts.verdict import Verdict

__all__ = [
    "Decision",
    "LaunchNoise",
    "NoiseRule",
    "Side",
    "critical",
    "decide",
    "deficit",
    "launch_count",
    "launch_means",
    "mean_within_se",
    "min_detectable_effect",
    "relative_change",
    "standard_error",
]

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

    outcome: Verdict  # PASS, FAIL or INCONCLUSIVE
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
    # Smallest real deficit this comparison catches 95 % of the time (tol + (z + 1.645)·se);
    # ``resolved`` is False when the noise margin alone exceeds the tolerance.
    mde: float | None = None
    resolved: bool = True
    n_launches_current: int | None = None
    look: Look | None = None  # judged by the sequential rule at this look

    @property
    def rerun(self) -> bool:
        """Inconclusive points should be measured again and decided on all samples."""
        return self.outcome == Verdict.INCONCLUSIVE

    def _sequential_advice(self, attached: bool, adjusted: bool, launch_effect: bool) -> str:
        look = self.look
        assert look is not None
        head = (
            f"inconclusive after {self.n_launches_current} launch"
            f"{'es' if self.n_launches_current != 1 else ''} (noise margin "
            f"{100 * self.margin:.1f} %, sequential rule at look {look.k} of {look.looks}): "
        )
        if attached:
            return head + "an attached server is never relaunched; widen the tolerance"
        if self.repeats_needed is not None:
            return head + (
                f"about {self.repeats_needed} launches would settle it; raise launch_budget "
                f"(--llmperf-launch-budget) to at least {self.repeats_needed}"
            )
        # A stored baseline carries the runner's noise between its day and today; a same-job
        # A/B pairs both sides minutes apart, which no recording can.
        ab = "; to gate a change this small, compare old and new in the same job ([[ab]])"
        if adjusted and launch_effect:  # the launches differ: only more of them average that
            return head + (
                "more launches within any budget would not settle it: the recorded launches "
                "differ beyond their passes' noise, so record the baseline with more launches "
                "(baseline_repeat, or a larger launch_budget while recording) or widen the "
                "tolerance" + ab
            )
        return head + (
            "more launches within any budget would not settle it: record the baseline with "
            "more launches (baseline_repeat)"
            # launch-adjusted, what is left moved within the launch: passes average it there
            + (" or in more passes a launch (baseline_passes)," if adjusted else "")
            + " or widen the tolerance"
            + ab
        )

    def advice(
        self, *, attached: bool = False, adjusted: bool = False, launch_effect: bool = False
    ) -> str:
        """What the user can do about an inconclusive verdict. An ``attached`` server is never
        relaunched (nor re-launched by a re-run): its advice names what can be done to it;
        an ``adjusted`` comparison's also names passes, unless its recorded noise found a
        ``launch_effect`` (``LaunchNoise``), which passes cannot average."""
        if self.outcome != Verdict.INCONCLUSIVE:
            return ""
        head = f"inconclusive (within noise margin {100 * self.margin:.1f} %): "
        if self.look is not None:
            return self._sequential_advice(attached, adjusted, launch_effect)
        if not self.resolved:
            mde = "" if self.mde is None else f", minimum detectable effect {100 * self.mde:.1f} %"
            if attached:
                more = (
                    "an attached server is never relaunched, so more samples of it cannot "
                    "narrow this margin: widen the tolerance, or restart the server and run "
                    "the session again"
                )
            else:
                more = (
                    "measure more independent launches (repeat in [sweep], each sample a fresh "
                    "launch unless --llmperf-relaunch=never) or widen the tolerance"
                )
            return (
                f"inconclusive: the noise margin {100 * self.margin:.1f} % exceeds the tolerance "
                f"{100 * self.tolerance:.3g} %{mde}; {more}"
            )
        if self.repeats_needed is not None:
            if attached:
                return (
                    f"{head}repeat on the same server to n={self.repeats_needed} samples "
                    f"(repeat = {self.repeats_needed} in [sweep] or the marker)"
                )
            return f"{head}re-run to n={self.repeats_needed} samples"
        if attached:
            return f"{head}run the session again, or re-record the baseline with more repeats"
        return f"{head}re-run, or re-record the baseline with more repeats"


def relative_change(current: float, base: float) -> float:
    """Signed ``(cur - base) / |base|``; a zero baseline gives 0 (equal) or ±inf."""
    if base == 0:
        return 0.0 if current == 0 else math.copysign(math.inf, current)
    return (current - base) / abs(base)


def deficit(current: float, base: float, direction: Direction) -> float:
    """How much worse ``current`` is than ``base`` as a fraction (negative = better)."""
    ch = relative_change(current, base)
    return -ch if direction == "higher" else ch


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


Z_POWER = 1.645  # one-sided 95 % power for the minimum detectable effect


def launch_means(values: Sequence[float], launches: Sequence[str | None] | None) -> list[float]:
    """Samples sharing a server launch averaged into one (its per-launch speed is shared, so
    they are one independent draw); a sample with no launch id counts on its own."""
    if launches is None:
        return [float(v) for v in values]
    groups: dict[object, list[float]] = {}
    for i, (v, lid) in enumerate(zip(values, launches, strict=True)):
        groups.setdefault(lid if lid is not None else ("sample", i), []).append(float(v))
    return [statistics.fmean(g) for g in groups.values()]


def mean_within_se(within_se: Sequence[float | None]) -> float | None:
    """The within-run relative se of the mean of samples with these ses (None: unmeasured),
    their errors independent. A sample without one (a steady window too short to judge) is
    taken as noisy as the measured ones, so one measured pass among two hundred adds its
    error once in two hundred, not in full."""
    ses = [w for w in within_se if w is not None]
    if not ses:
        return None
    return math.sqrt(sum(x * x for x in ses) / len(ses) / len(within_se))


def launch_count(launches: Sequence[str | None] | None, n: int) -> int:
    """Independent launches among ``n`` samples (unknown ids count one each)."""
    return n if launches is None else len(launch_means([0.0] * n, launches))


@dataclass(frozen=True)
class Side:
    """One side of a comparison, as the noise model sees it (all relative to the baseline)."""

    mean: float
    between_sd: float | None  # std of launch means, relative; None with < 2 launches
    launches: int
    within_se: float | None = None  # within-run relative se of this side's mean

    @classmethod
    def from_samples(
        cls,
        values: Sequence[float],
        launches: Sequence[str | None] | None = None,
        within_se: Sequence[float | None] = (),
        scale: float | None = None,
    ) -> Side:
        """From raw samples (their launch ids and each sample's within-run se)."""
        means = launch_means(values, launches)
        ref = abs(scale if scale is not None else statistics.fmean(values)) or 1.0
        sd = statistics.stdev(means) / ref if len(means) >= 2 else None
        return cls(statistics.fmean(values), sd, len(means), mean_within_se(within_se))


@dataclass(frozen=True)
class LaunchNoise:
    """A relative launch-to-launch spread and how many launches it was measured over;
    ``launch_effect``: the launches differed beyond their passes' noise (so more passes a
    launch cannot narrow it, more launches can)."""

    sd: float
    launches: int
    launch_effect: bool = False

    def pooled_with(self, sd: float | None, launches: int) -> float:
        """This spread pooled with one measured over ``launches`` (degrees of freedom
        weighted): two launches alone can land close together by chance."""
        if sd is None or launches < 2:
            return self.sd
        dof_a, dof_b = max(self.launches - 1, 1), launches - 1
        return math.sqrt((dof_a * self.sd**2 + dof_b * sd**2) / (dof_a + dof_b))

    def with_current(self, cur: Side, floor: float) -> tuple[float, int]:
        """(σ, degrees of freedom): this spread pooled with the current launches' own."""
        dof_a = max(self.launches - 1, 1)
        if cur.between_sd is None or cur.launches < 2:
            return max(self.sd, floor), dof_a
        return max(self.pooled_with(cur.between_sd, cur.launches), floor), dof_a + cur.launches - 1


def pooled_dof(cur: Side, base: Side) -> int:
    """Degrees of freedom of the pooled launch-to-launch σ (0: σ is assumed)."""
    return sum(s.launches - 1 for s in (cur, base) if s.between_sd is not None and s.launches >= 2)


def critical(rule: NoiseRule, dof: int) -> float:
    """The margin's multiplier: ``rule.z`` for an assumed σ, else Student's t quantile at the
    same one-sided level with ``dof`` degrees of freedom."""
    if dof <= 0 or rule.z <= 0:
        return rule.z
    level = float(_scipy_stats.norm.cdf(rule.z))
    return float(_scipy_stats.t.ppf(level, dof))


def standard_error(cur: Side, base: Side, rule: NoiseRule) -> tuple[float, float, bool]:
    """(se of the relative deficit, σ between launches used, whether σ was assumed).

    σ is pooled from both sides' launch-to-launch spread (degrees of freedom weighted); with no
    side spanning two launches it is ``rule.assumed_noise``. Within-run errors add on top.
    """
    ss, dof = 0.0, 0
    for side in (cur, base):
        if side.between_sd is not None and side.launches >= 2:
            ss += (side.launches - 1) * side.between_sd**2
            dof += side.launches - 1
    assumed = dof == 0
    sigma = max(rule.assumed_noise if assumed else math.sqrt(ss / dof), rule.noise_floor)
    return _se(sigma, cur, base), sigma, assumed


def _se(sigma: float, cur: Side, base: Side) -> float:
    var = sigma**2 * (1 / max(cur.launches, 1) + 1 / max(base.launches, 1))
    var += (cur.within_se or 0.0) ** 2 + (base.within_se or 0.0) ** 2
    return math.sqrt(var)


def min_detectable_effect(se: float, tolerance: float, rule: NoiseRule) -> float:
    """The smallest real deficit that fails with 95 % probability: tol + (z + 1.645)·se."""
    return tolerance + (rule.z + Z_POWER) * se


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
    current_launches: Sequence[str | None] | None = None,
    current_within_se: Sequence[float | None] = (),
    base_launches: int | None = None,
    base_within_se: float | None = None,
    t_margin: bool = False,
    look: Look | None = None,
    noise: LaunchNoise | None = None,
) -> Decision:
    """Apply the rule in the module docstring to one metric at one point.

    ``current_launches`` names the server launch of each current sample (samples of one
    launch count once for between-launch noise); ``base_launches`` is how many launches the
    baseline's samples came from (None: each sample its own, as old baselines assumed).
    ``look``: judge by the sequential rule (``verdicts/sequential.py``) at that look, when the
    noise is measured; an assumed noise keeps the rule above. ``noise``: at a look, the launch
    noise pooled over more launches than this point's baseline has (``LaunchNoise.launches``
    minus one its degrees of freedom; the baseline's own spread must be part of it).
    """
    rule = rule or NoiseRule()
    cur = [float(current)] if isinstance(current, int | float) else [float(v) for v in current]
    if not cur:
        raise ValueError("decide() needs at least one current sample")
    if not 0 < tolerance < 1:
        raise ValueError(f"tolerance must be a fraction with 0 < tol < 1, got {tolerance!r}")
    n_c = len(cur)
    d = deficit(statistics.fmean(cur), base_mean, direction)
    scale = abs(base_mean) or 1.0
    cur_side = Side.from_samples(cur, current_launches, current_within_se, scale)
    k_b = base_n if base_launches is None else max(1, min(base_launches, base_n))
    base_side = Side(base_mean, base_std / scale if k_b >= 2 else None, k_b, base_within_se)
    se, sigma, assumed = standard_error(cur_side, base_side, rule)
    crit = critical(rule, pooled_dof(cur_side, base_side)) if t_margin else rule.z
    mde = tolerance + (crit + Z_POWER) * se
    k_c = cur_side.launches

    if look is not None and noise is not None:
        sigma, dof = noise.with_current(cur_side, rule.noise_floor)
        se = _se(sigma, cur_side, base_side)
        return _sequential(d, se, sigma, tolerance, look, cur_side, base_side, n_c, base_n, mde,
                           prior_dof=dof)  # fmt: skip
    if look is not None and not assumed:
        return _sequential(d, se, sigma, tolerance, look, cur_side, base_side, n_c, base_n, mde)
    if (
        base_samples is not None
        and len(base_samples) >= rule.mw_min_samples
        and k_b >= rule.mw_min_samples
        and k_c >= rule.mw_min_samples
    ):
        p_worse = _mann_whitney(cur, base_samples, tolerance, direction, worse=True)
        p_better = _mann_whitney(cur, base_samples, tolerance, direction, worse=False)
        if d > tolerance:
            outcome = Verdict.FAIL if p_worse < rule.mw_alpha else Verdict.INCONCLUSIVE
        else:
            outcome = Verdict.PASS
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
            repeats_needed=min(2 * n_c, MAX_SUGGESTED_REPEATS) if outcome != Verdict.PASS else None,
            mde=mde,
            n_launches_current=k_c,
        )

    margin = crit * se
    # Only a measured noise can say a point is unresolvable; an assumed one keeps the plain
    # margin rule (and says the noise was assumed).
    resolved = assumed or margin <= tolerance
    if d > tolerance + margin:
        outcome = Verdict.FAIL
    elif d > tolerance or (not resolved and d > -(tolerance + margin)):
        # Beyond tolerance but within noise, or noise too large to tell a pass from a miss.
        outcome = Verdict.INCONCLUSIVE
    else:
        outcome = Verdict.PASS
    needed = None
    if outcome == Verdict.INCONCLUSIVE:
        # Fewest independent current launches that would settle today's deficit, if any.
        target = max(abs(d - tolerance), 1e-12)
        for k in range(k_c + 1, MAX_SUGGESTED_REPEATS + 1):
            trial = Side(cur_side.mean, cur_side.between_sd, k, cur_side.within_se)
            trial_crit = critical(rule, pooled_dof(trial, base_side)) if t_margin else rule.z
            if trial_crit * standard_error(trial, base_side, rule)[0] < target:
                needed = k
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
        n_baseline=base_n,
        noise_assumed=assumed,
        repeats_needed=needed,
        mde=mde,
        resolved=resolved,
        n_launches_current=k_c,
    )


def _sequential(
    d: float,
    se: float,
    sigma: float,
    tolerance: float,
    look: Look,
    cur: Side,
    base: Side,
    n_c: int,
    base_n: int,
    mde: float,
    *,
    prior_dof: int | None = None,
) -> Decision:
    """One look of the sequential rule: fail when certainly beyond the tolerance, pass when a
    regression of ``DETECT`` tolerances is ruled out, else inconclusive (``repeats_needed``:
    the launches that would settle today's deficit, if the budget has them). ``prior_dof``:
    σ's degrees of freedom when it was pooled beyond this point (``LaunchNoise.with_current``)."""
    dof = pooled_dof(cur, base) if prior_dof is None else prior_dof
    margin = look.critical(dof) * se
    if d - margin > tolerance:
        outcome = Verdict.FAIL
    elif d + look.critical_pass(dof) * se < DETECT * tolerance:
        outcome = Verdict.PASS
    else:
        outcome = Verdict.INCONCLUSIVE
    needed = None
    if outcome == Verdict.INCONCLUSIVE:
        # today's deficit settled on the side it lies on: beyond the tolerance it would fail
        worse = d > tolerance
        target = max(d - tolerance if worse else DETECT * tolerance - d, 1e-12)
        for k in range(cur.launches + 1, look.looks + 1):
            trial = Side(cur.mean, cur.between_sd, k, cur.within_se)
            later = Look(min(look.k + k - cur.launches, look.looks), look.looks, look.alpha,
                         look.beta)  # fmt: skip
            more = k - cur.launches
            dof_k = dof + more if prior_dof is not None else pooled_dof(trial, base)
            crit = later.critical(dof_k) if worse else later.critical_pass(dof_k)
            if crit * _se(sigma, trial, base) < target:
                needed = k
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
        n_baseline=base_n,
        repeats_needed=needed,
        mde=mde,
        resolved=needed is not None or outcome != Verdict.INCONCLUSIVE,
        n_launches_current=cur.launches,
        look=look,
    )
