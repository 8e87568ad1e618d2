"""Sequential verdicts: decide a point after as few launches as its noise allows, at a promised
false-alarm rate however many times it is looked at.

A point is judged after every launch that measured it (look ``k`` of at most ``K``, ``K`` the
config's launch budget). Each look is the usual comparison of ``stats.decide`` (deficit ``d``
of the current mean against the baseline, standard error ``se`` from the launch-to-launch
spread pooled over the baseline's and the current launches) with a look-specific critical
value ``c_k`` in place of the fixed ``z``:

* **fail**          ``d - c_k·se > tol``: the regression is beyond the tolerance, certainly;
* **pass**          ``d + p_k·se < DETECT·tol`` (and not a fail): a regression of ``DETECT``
  tolerances (twice it) is ruled out (an improvement beyond the tolerance passes too, with the
  usual "stale baseline" warning);
* **inconclusive**  otherwise: measure another launch while the budget lasts; at the last
  look the point stays inconclusive (budget spent).

The two sides make different promises. A false fail is the costly error (a red build nobody
caused), so ``c_k`` spends ``α`` (2.5 %) at a deficit exactly at the tolerance. The pass side
is a futility bound: ``p_k`` spends ``β`` (5 %) at a regression of twice the tolerance, so such
a regression passes at most 5 % of the time, and an unchanged point passes once its noise
margin is under the tolerance rather than having to prove the change smaller than a tolerance
the launch noise may exceed. (The plain rule of ``stats.decide`` passes every ``d <= tol``, with
no promise at all about what passes.)

Error spending (group-sequential, Bonferroni-bounded): look ``k`` spends
``α_k = α·(k/K)^ρ - α·((k-1)/K)^ρ`` of the total ``α`` (``ρ = 1``: Pocock-like, equal shares,
so a clear point stops at the first look). ``c_k`` is the one-sided ``1 - α_k`` quantile of
Student's t with the pooled degrees of freedom (normal when the noise is assumed); ``p_k``
likewise with ``β_k``. Whatever
the dependence between looks (they share the baseline and earlier launches), the union bound
gives ``P(any false fail) ≤ Σ α_k = α`` when the true deficit is exactly the tolerance (less
below it), and likewise ``P(a regression of DETECT·tol passes) ≤ β``: the guarantee holds under
optional stopping, unlike re-running until a point passes.

The cost of the bound against exact group-sequential boundaries is small at these ``K``:
K = 6, α = 2.5 % gives ``c_k = z(0.9958) = 2.64`` per look, against Pocock's exact 2.45.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from scipy import stats as _scipy_stats

__all__ = [
    "BACKSTOP_SHARE",
    "DEFAULT_ALPHA",
    "DETECT",
    "PASS_BETA",
    "Look",
    "look_critical",
    "spent",
]

DEFAULT_ALPHA = 0.025  # one-sided, per metric and point, over all its looks together
PASS_BETA = 0.05  # what a regression of DETECT tolerances may pass with, over all looks
DETECT = 2.0  # the regression a pass rules out, in tolerances
RHO = 1.0
# Adjusting, the plain comparison keeps this share of the false-alarm rate as a fail-only
# backstop for a regression every level shares (which adjusting cancels).
BACKSTOP_SHARE = 0.1


def spent(k: int, looks: int, alpha: float = DEFAULT_ALPHA, rho: float = RHO) -> float:
    """``α_k``: the share of ``alpha`` look ``k`` (1-based) of ``looks`` may spend."""
    if looks < 1 or k < 1:
        raise ValueError(f"look {k} of {looks}: both must be >= 1")
    k = min(k, looks)
    return alpha * ((k / looks) ** rho - ((k - 1) / looks) ** rho)


@lru_cache(maxsize=4096)
def look_critical(k: int, looks: int, dof: int, alpha: float = DEFAULT_ALPHA) -> float:
    """``c_k``: one-sided ``1 - α_k`` quantile, Student's t with ``dof`` (normal when 0)."""
    a = spent(k, looks, alpha)
    if dof <= 0:
        return float(_scipy_stats.norm.isf(a))
    return float(_scipy_stats.t.isf(a, dof))


@dataclass(frozen=True)
class Look:
    """Where a point stands: look ``k`` (launches that measured it) of at most ``looks``;
    ``alpha`` (false fails) and ``beta`` (passes of a ``DETECT``-tolerance regression) are what
    this comparison may spend over all its looks."""

    k: int
    looks: int
    alpha: float = DEFAULT_ALPHA
    beta: float = PASS_BETA

    def __post_init__(self) -> None:
        if self.looks < 1 or self.k < 1:
            raise ValueError(f"Look: k and looks must be >= 1, got {self.k} of {self.looks}")
        if not (0 < self.alpha < 1 and 0 < self.beta < 1):
            raise ValueError(f"Look: alpha and beta must be in (0, 1): {self.alpha}, {self.beta}")

    @property
    def last(self) -> bool:
        return self.k >= self.looks

    def critical(self, dof: int) -> float:
        return look_critical(min(self.k, self.looks), self.looks, dof, self.alpha)

    def critical_pass(self, dof: int) -> float:
        """``p_k``: the pass side's multiplier (``beta`` spent like ``alpha``)."""
        return look_critical(min(self.k, self.looks), self.looks, dof, self.beta)

    def share(self, fraction: float) -> Look:
        """The same look spending ``fraction`` of this alpha (a backstop comparison)."""
        return Look(self.k, self.looks, self.alpha * fraction, self.beta)
