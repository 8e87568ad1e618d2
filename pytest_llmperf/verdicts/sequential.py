"""Sequential verdicts: decide a point after as few launches as its noise allows, at a promised
false-alarm rate however many times it is looked at.

A point is judged after every launch that measured it (look ``k`` of at most ``K``, ``K`` the
config's launch budget). Each look is the usual comparison of ``stats.decide`` (deficit ``d``
of the current mean against the baseline, standard error ``se`` from the launch-to-launch
spread pooled over the baseline's and the current launches) with a look-specific critical
value ``c_k`` in place of the fixed ``z``:

* **fail**          ``d - c_k·se > tol``: the regression is beyond the tolerance, certainly;
* **pass**          ``d + c_k·se < tol``: the change is certainly smaller than the tolerance
  (an improvement beyond it passes too, with the usual "stale baseline" warning);
* **inconclusive**  otherwise: measure another launch while the budget lasts; at the last
  look the point stays inconclusive (budget spent).

Error spending (group-sequential, Bonferroni-bounded): look ``k`` spends
``α_k = α·(k/K)^ρ - α·((k-1)/K)^ρ`` of the total ``α`` (``ρ = 1``: Pocock-like, equal shares,
so a clear point stops at the first look). ``c_k`` is the one-sided ``1 - α_k`` quantile of
Student's t with the pooled degrees of freedom (normal when the noise is assumed). Whatever
the dependence between looks (they share the baseline and earlier launches), the union bound
gives ``P(any false fail) ≤ Σ α_k = α`` when the true deficit is exactly the tolerance (less
below it), and likewise ``P(a regression beyond tol passes) ≤ α``: the guarantee holds under
optional stopping, unlike re-running until a point passes.

The cost of the bound against exact group-sequential boundaries is small at these ``K``:
K = 6, α = 2.5 % gives ``c_k = z(0.9958) = 2.64`` per look, against Pocock's exact 2.45.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from scipy import stats as _scipy_stats

__all__ = [
    "DEFAULT_ALPHA",
    "Look",
    "look_critical",
    "spent",
]

DEFAULT_ALPHA = 0.025  # one-sided, per metric and point, over all its looks together
RHO = 1.0


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
    ``alpha`` is what this comparison may spend over all its looks."""

    k: int
    looks: int
    alpha: float = DEFAULT_ALPHA

    def __post_init__(self) -> None:
        if self.looks < 1 or self.k < 1:
            raise ValueError(f"Look: k and looks must be >= 1, got {self.k} of {self.looks}")
        if not 0 < self.alpha < 1:
            raise ValueError(f"Look: alpha must be in (0, 1), got {self.alpha}")

    @property
    def last(self) -> bool:
        return self.k >= self.looks

    def critical(self, dof: int) -> float:
        return look_critical(min(self.k, self.looks), self.looks, dof, self.alpha)

    def share(self, fraction: float) -> Look:
        """The same look spending ``fraction`` of this alpha (a backstop comparison)."""
        return Look(self.k, self.looks, self.alpha * fraction)
