"""meshbench.fit: Hockney latency-bandwidth fits of a collective's time against its size,
piecewise where the library switches protocol or algorithm, and their held-out error.

On each segment of consecutive measured sizes, t(n) = alpha + beta * n (n bytes, the binaries'
size S; alpha seconds; beta seconds per byte, 1/bandwidth). Pure numpy over sorted (n, t)
arrays: no files, no printing. Not a general regression library. The rules (docs/predict.md):

- a segment's line is the one of least SAD, the sum of absolute log ratios |ln(t_fit / t)|
  over its sizes (every size counts alike, 8 B as much as 128 MiB; 2x too slow costs as much
  as 2x too fast), among the lines through two of its points, the flat lines through one and
  the lines from the origin through one, with alpha >= 0 and beta >= 0. A least-absolute-
  deviations fit over the lines that pass through the data, exact for data on a line, robust
  to a few sizes a busy machine slowed (a median, not a mean), and deterministic;
- the segments (1 to max_segments, each of at least min_points consecutive sizes) minimise
  SAD + PENALTY k over k segments, SAD summed over all sizes: a segment is added only where it
  lowers the summed |ln(t_fit / t)| by PENALTY (0.5: ten sizes by 5% each). Set on generated
  data and this machine's measurements (tests/python/test_calibrate.py, docs/predict.md):
  10% noise does not split one line while a 2x bandwidth cliff or a 6x latency step is found;
  measured curves bend more smoothly than one Hockney line, and a Bayesian information
  criterion (N ln SAD + 4 k ln N) kept them single lines held out 8 to 23% off. Dynamic
  programming over every split: exact and deterministic (ties: fewer segments, then the
  earlier breakpoint);
- held out: 2-fold over sizes. The whole procedure, breakpoints included, is refitted on the
  even-indexed sizes and predicts the odd ones, then the reverse; each size's held-out error
  is |t_pred / t - 1| from the fit that did not see it.

Reference: R. Hockney, "The communication challenge for MPP: Intel Paragon and Meiko CS-2",
Parallel Computing 20 (1994); the rules and their reasons: docs/predict.md.
"""
import math

import numpy as np

MIN_POINTS = 3
MAX_SEGMENTS = 4
PENALTY = 0.5


class Segment:
    """One piece of a fit: valid over the measured sizes [lo, hi] (bytes), points i0..i1-1."""

    def __init__(self, i0, i1, lo, hi, alpha, beta, resid):
        self.i0, self.i1, self.lo, self.hi = i0, i1, int(lo), int(hi)
        self.alpha, self.beta = float(alpha), float(beta)
        self.resid = np.asarray(resid, dtype=float)  # relative residuals t_fit/t - 1 of its points

    @property
    def bandwidth(self):
        """1 / beta in bytes per second (inf when beta is 0)."""
        return math.inf if self.beta <= 0 else 1.0 / self.beta

    def __repr__(self):
        return f"Segment([{self.lo}, {self.hi}], alpha={self.alpha:.3g} s, beta={self.beta:.3g} s/B)"


def line(n, t):
    """(alpha, beta, sad): of the lines through two points, the flat lines through one (beta 0)
    and the lines from the origin through one (alpha 0) with alpha, beta >= 0, the one of least
    sad = sum |ln((alpha + beta n_i) / t_i)|; the first on a tie. Every candidate is tried
    (vectorised: m(m-1)/2 + 2m lines over m points). For sum |(alpha + beta n_i)/t_i - 1|, convex
    and piecewise linear, these vertices hold the exact minimum; the log ratio is used instead
    because it charges a regime 10x slower than the line 2.3 per size, where t_fit/t - 1 would
    charge at most 1 and let the line pass under it."""
    n, t = np.asarray(n, dtype=float), np.asarray(t, dtype=float)
    i, j = np.triu_indices(len(n), 1)
    dn = n[j] - n[i]
    b_pair = (t[j] - t[i]) / dn
    a_pair = (n[j] * t[i] - n[i] * t[j]) / dn
    pos = n > 0
    a = np.concatenate([a_pair, t, np.zeros(int(pos.sum()))])
    b = np.concatenate([b_pair, np.zeros(len(t)), t[pos] / n[pos]])
    ok = (a >= 0) & (b >= 0)
    a, b = a[ok], b[ok]
    with np.errstate(divide="ignore"):
        sad = np.abs(np.log((a[:, None] + b[:, None] * n[None, :]) / t[None, :])).sum(axis=1)
    k = int(np.argmin(sad))
    return float(a[k]), float(b[k]), float(sad[k])


def _costs(n, t, min_points):
    """cost[i][j]: the sad of one segment's line over points i..j-1 (j - i >= min_points), else None."""
    N = len(n)
    cost = [[None] * (N + 1) for _ in range(N + 1)]
    for i in range(N):
        for j in range(i + min_points, N + 1):
            cost[i][j] = line(n[i:j], t[i:j])[2]
    return cost


def score(sad, k):
    """The criterion the segmentation minimises (lower is better)."""
    return sad + PENALTY * k


def fit(n, t, max_segments=MAX_SEGMENTS, min_points=MIN_POINTS):
    """Piecewise fit of times t (s) at sizes n (bytes, ascending, distinct): a list of Segments
    in size order. Raises ValueError with fewer than min_points sizes."""
    n, t = np.asarray(n, dtype=float), np.asarray(t, dtype=float)
    N = len(n)
    if N < min_points:
        raise ValueError(f"{N} sizes; a fit needs {min_points}")
    if np.any(np.diff(n) <= 0) or np.any(~np.isfinite(t)) or np.any(t <= 0):
        raise ValueError("sizes must ascend without repeats and times be finite and positive")
    cost = _costs(n, t, min_points)
    # best[k][j] = (sad, splits) of the first j points in k segments.
    best = [[None] * (N + 1) for _ in range(max_segments + 1)]
    best[0][0] = (0.0, ())
    for k in range(1, max_segments + 1):
        for j in range(k * min_points, N + 1):
            for i in range((k - 1) * min_points, j - min_points + 1):
                prev = best[k - 1][i]
                if prev is None or cost[i][j] is None:
                    continue
                cand = (prev[0] + cost[i][j], prev[1] + (i,))
                if best[k][j] is None or cand[0] < best[k][j][0]:
                    best[k][j] = cand
    options = [(score(best[k][N][0], k), k) for k in range(1, max_segments + 1) if best[k][N] is not None]
    _, k = min(options)
    starts = list(best[k][N][1]) + [N]
    segs = []
    for i0, i1 in zip(starts[:-1], starts[1:]):
        a, b, _ = line(n[i0:i1], t[i0:i1])
        segs.append(Segment(i0, i1, n[i0], n[i1 - 1], a, b, (a + b * n[i0:i1]) / t[i0:i1] - 1.0))
    return segs


def pick(segs, size):
    """(segment, extrapolated) for a size: the segment whose measured range holds it; between two
    segments' ranges, the nearer in log size (the boundary is the geometric mean of the gap's
    ends); below the first or above the last, that end's segment, extrapolated."""
    if size < segs[0].lo:
        return segs[0], True
    for a, b in zip(segs[:-1], segs[1:]):
        if size <= a.hi:
            return a, False
        if size < b.lo:
            return (a if size <= math.sqrt(a.hi * b.lo) else b), False
    last = segs[-1]
    return last, size > last.hi


def predict(segs, size):
    """(time in s, extrapolated) of one size under a fit."""
    s, extra = pick(segs, size)
    return s.alpha + s.beta * size, extra


def heldout(n, t, max_segments=MAX_SEGMENTS, min_points=MIN_POINTS):
    """2-fold over sizes: (errors [N] with |t_pred/t - 1| for each size from the fit of the
    other half, NaN where none; (k_even, k_odd) segments the two half fits found). With fewer
    than 2 min_points sizes, all NaN and (0, 0): a half could not be fitted."""
    n, t = np.asarray(n, dtype=float), np.asarray(t, dtype=float)
    N = len(n)
    err = np.full(N, np.nan)
    if N < 2 * min_points:
        return err, (0, 0)
    ks = []
    for train in (0, 1):
        tr, te = np.arange(train, N, 2), np.arange(1 - train, N, 2)
        segs = fit(n[tr], t[tr], max_segments, min_points)
        ks.append(len(segs))
        for i in te:
            err[i] = abs(predict(segs, n[i])[0] / t[i] - 1.0)
    return err, tuple(ks)
