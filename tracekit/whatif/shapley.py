"""Interactions: a measured difference between two configurations of a
factorial design, split across its factors with Shapley values.

From configuration A to configuration B over factors F (each factor one
level in A, another in B), every subset S of F names a cell: A with the
factors of S set to B's levels. With v(S) = median(A) - median(cell S),
factor f's share is its marginal effect averaged over the orders in which
the factors could be switched:

    phi_f = sum over S not holding f of |S|! (|F| - |S| - 1)! / |F|!
            x (v(S + f) - v(S))

The shares add up to v(F) = median(A) - median(B) exactly. For each pair
(f, g) the interaction is v({f, g}) - v({f}) - v({g}) + v({}): how much the
effect of one depends on the other (0: they add). Intervals: percentile
bootstrap (each cell's requests resampled independently, seeded), 2.5-97.5 %.
"""

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from ..core.errors import TracekitError
from .calibrate import load_requests
from .factors import as_labels

RESAMPLES = 2000
SEED = 26


@dataclass
class Split:
    factors: tuple
    total: float
    shares: dict
    interactions: dict
    total_ci: tuple = None
    cis: dict = field(default_factory=dict)
    cells: dict = field(default_factory=dict)  # subset -> (n, median s)


def _values(medians, factors):
    """v(S) for every subset, from the cells' medians."""
    base = medians[()]
    return {s: base - medians[s] for s in medians}


def _shares(v, factors):
    k = len(factors)
    out = {}
    for f in factors:
        others = [g for g in factors if g != f]
        total = 0.0
        for r in range(k):
            for sub in itertools.combinations(others, r):
                with_f = tuple(g for g in factors if g in sub or g == f)
                without = tuple(g for g in factors if g in sub)
                w = math.factorial(len(sub)) * math.factorial(k - len(sub) - 1) / math.factorial(k)
                total += w * (v[with_f] - v[without])
        out[f] = total
    return out


def _pairs(v, factors):
    out = {}
    for f, g in itertools.combinations(factors, 2):
        both = tuple(x for x in factors if x in (f, g))
        out[(f, g)] = v[both] - v[(f,)] - v[(g,)] + v[()]
    return out


def split(con, where, a, b, resamples=RESAMPLES, seed=SEED):
    """The Split of median(a) - median(b) ({factor: level} each, the same factors)."""
    factors = tuple(k for k in a if a[k] != b.get(k))
    if set(a) != set(b) or not factors:
        raise TracekitError("interactions: --from and --to must name the same factors, "
                            "at least one with another level")
    durations = {}
    for r in range(len(factors) + 1):
        for sub in itertools.combinations(factors, r):
            cfg = {k: (b[k] if k in sub else a[k]) for k in a}
            df = load_requests(con, {**where, **as_labels(cfg)})
            if df.empty:
                cell = ", ".join(f"{k}={v}" for k, v in cfg.items())
                raise TracekitError(f"interactions: no requests at {cell}: the design needs "
                                    f"every combination of {', '.join(factors)}")
            durations[sub] = df.duration_ns.to_numpy() / 1e9
    medians = {s: float(np.median(d)) for s, d in durations.items()}
    v = _values(medians, factors)
    out = Split(factors, v[factors], _shares(v, factors), _pairs(v, factors),
                cells={s: (len(d), medians[s]) for s, d in durations.items()})
    rng = np.random.default_rng(seed)
    boot = {s: np.median(d[rng.integers(0, len(d), (resamples, len(d)))], axis=1)
            for s, d in durations.items()}
    bv = {s: boot[()] - boot[s] for s in boot}
    pct = (2.5, 97.5)
    out.total_ci = tuple(np.percentile(bv[factors], pct))
    for f, x in _shares(bv, factors).items():
        out.cis[f] = tuple(np.percentile(x, pct))
    for p, x in _pairs(bv, factors).items():
        out.cis[p] = tuple(np.percentile(x, pct))
    return out
