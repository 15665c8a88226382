"""One judgement of a change between two runs of the same rows (``judge_change``): whether a paired headline moved
beyond noise, and whether that is a regression, at a family-wise level. ``compare``, the gate's ``--baseline`` checks,
``trend``'s markers and the training callback's ``stop_on_fail="regression"`` all call it.

For one paired headline (a family's accuracy, or a meaning-preserving family's flip rate, on the rows both runs
scored), with ``d`` the paired change new - old, ``SE`` its paired cluster-bootstrap standard error, ``W`` and ``B``
the rows that changed for the worse and for the better (McNemar's discordant pairs), ``D = W + B``, ``n`` the matched
rows, and ``level = alpha / m`` (Bonferroni over the ``m`` paired headlines judged together: ``level``):

- **the test**: McNemar's exact test, ``p_two = min(1, 2 P(X <= min(W, B)))`` and ``p_worse = P(X >= W)``,
  ``X ~ Binomial(D, 1/2)``;
- **the interval**, in one of two ways that agree with the test: with ``D >= EXACT_BELOW`` discordant rows, the
  paired bootstrap's ``d -/+ z SE``; with fewer (where a normal interval is not valid), the change of the rows
  ``(B - W) / n`` (accuracy; ``(W - B) / n`` for a flip rate) and the exact conditional interval that inverts the
  same binomial test, ``(D / n)(2 pi - 1)`` over the Clopper-Pearson bounds of ``pi = P(a discordant row changed
  for the better)``;
- **a regression** (a one-sided question): worse, with the one-sided ``1 - level`` bound past the tolerance
  (``max_regression``, ``max_flip_regression``) and ``p_worse < level``. A called regression always has its test's
  p below the level;
- **beyond noise** (either way, two-sided): the two-sided ``1 - level`` interval excludes 0 and ``p_two < level``.
  A move beyond noise that is no regression (better, or worse within the tolerance) never changes an exit
  status.

>>> call = judge_change("acc", diff=-0.10, se=0.02, worse=30, better=6, n_rows=240, tolerance=0.0, level=0.05 / 4)
>>> call.beyond, call.regression, call.method
(True, True, 'paired bootstrap')
>>> judge_change("acc", diff=-0.02, se=0.01, worse=5, better=0, n_rows=240, tolerance=0.0, level=0.05 / 4).regression
False
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

from laya_robustness.metrics.baseline import mcnemar_p

#: Fewer discordant rows than this and the interval is the exact conditional one (a normal one is not valid).
EXACT_BELOW = 20
#: The paired headlines and which way is worse: accuracy down, a flip rate up.
WORSE = {"acc": -1, "flip": +1}
_NORMAL = NormalDist()


@dataclass(frozen=True)
class ChangeCall:
    """The judgement of one paired headline (see the module doc): its change new - old and two-sided interval at
    ``level``, the test's two-sided and worse-side p, how the interval was made, and the two verdicts."""

    metric: str
    diff: float
    interval: tuple[float, float]
    p: float
    p_worse: float
    level: float
    method: str
    beyond: bool
    regression: bool


#: The largest n whose binomial terms are summed as they are (``math.comb(n, i)`` fits a float); above, in logs.
EXACT_TERMS_MAX_N = 1000


def binomial_tail(k: int, n: int, pi: float) -> float:
    """``P(X >= k)`` for ``X ~ Binomial(n, pi)``: the terms summed as they are up to ``EXACT_TERMS_MAX_N`` trials,
    above in logs (``lgamma``), scaled by the largest, so no term overflows a float whatever n.

    >>> binomial_tail(2, 2, 0.5)
    0.25
    >>> round(binomial_tail(1300, 2600, 0.5), 4)
    0.5078
    """
    k = max(k, 0)
    if k > n:
        return 0.0
    if n <= EXACT_TERMS_MAX_N:
        return sum(math.comb(n, i) * pi ** i * (1 - pi) ** (n - i) for i in range(k, n + 1))
    if pi <= 0 or pi >= 1:
        return 1.0 if pi >= 1 or k == 0 else 0.0
    log_pi, log_q, log_n = math.log(pi), math.log1p(-pi), math.lgamma(n + 1)
    logs = [log_n - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_pi + (n - i) * log_q
            for i in range(k, n + 1)]
    top = max(logs)
    return min(1.0, math.exp(top) * math.fsum(math.exp(x - top) for x in logs))


def clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    """The one-sided ``1 - alpha`` bounds of a binomial proportion from ``k`` of ``n``: the lower ``L`` with
    ``P(X >= k | L) = alpha`` (0 when k = 0) and the upper ``U`` with ``P(X <= k | U) = alpha`` (1 when k = n),
    found by bisection.

    >>> [round(b, 4) for b in clopper_pearson(0, 10, 0.025)]
    [0.0, 0.3085]
    """
    def solve(f, increasing: bool) -> float:
        low, high = 0.0, 1.0
        for _ in range(60):
            mid = (low + high) / 2
            if (f(mid) < alpha) == increasing:
                low = mid
            else:
                high = mid
        return (low + high) / 2

    lower = 0.0 if k == 0 else solve(lambda pi: binomial_tail(k, n, pi), True)
    upper = 1.0 if k == n else solve(lambda pi: 1 - binomial_tail(k + 1, n, pi), False)
    return lower, upper


def judge_change(metric: str, *, diff: float | None, se: float | None, worse: int, better: int, n_rows: int,
                 tolerance: float, level: float) -> ChangeCall:
    """The judgement of one paired headline (see the module doc). ``metric``: ``"acc"`` or ``"flip"``; ``diff``,
    ``se``: the paired bootstrap's change new - old and its SE (None: none was made); ``worse``, ``better``: the
    rows that changed each way; ``n_rows``: the rows matched; ``tolerance``: the change the team accepts;
    ``level``: the per-headline level ``alpha / m``."""
    if metric not in WORSE:
        raise ValueError(f"metric must be one of {sorted(WORSE)}, got {metric!r}")
    if not 0 < level < 1 or n_rows <= 0 or worse < 0 or better < 0 or worse + better > n_rows:
        raise ValueError(f"level in (0, 1), n_rows > 0 and 0 <= worse + better <= n_rows, got level={level}, "
                         f"n_rows={n_rows}, worse={worse}, better={better}")
    sign, discordant = WORSE[metric], worse + better
    p, p_worse = mcnemar_p(worse, better), binomial_tail(worse, discordant, 0.5) if discordant else 1.0
    if discordant >= EXACT_BELOW and diff is not None and se:
        method, z = "paired bootstrap", _NORMAL.inv_cdf(1 - level / 2)
        interval = (diff - z * se, diff + z * se)
        bound = sign * diff - _NORMAL.inv_cdf(1 - level) * se  # the one-sided bound of the change toward worse
    else:
        method, scale = "exact McNemar", discordant / n_rows
        diff = sign * (worse - better) / n_rows
        two = [scale * (2 * pi - 1) for pi in clopper_pearson(worse, discordant, level / 2)] if discordant else [0, 0]
        interval = tuple(sorted(sign * w for w in two))
        bound = scale * (2 * clopper_pearson(worse, discordant, level)[0] - 1) if discordant else 0.0
    regression = sign * diff > 0 and bound > tolerance and p_worse < level
    beyond = (interval[0] > 0 or interval[1] < 0) and p < level
    return ChangeCall(metric, diff, (interval[0], interval[1]), p, p_worse, level, method, beyond, regression)


def family_wise_level(alpha: float, m: int) -> float:
    """The per-headline level of ``m`` paired headlines judged together at family-wise ``alpha`` (Bonferroni).

    >>> family_wise_level(0.05, 10)
    0.005
    """
    return alpha / max(1, m)
