"""meshbench.spread: the median of a measurement and its spread, its rounds, and printing a
number to the precision its spread supports (docs/report.md, "Rounds and spread").

No HDF5 and no I/O: functions of numbers, shared by scripts/report and scripts/plot.

  median(values)            the binaries' median (src/core/stats.cpp: linear interpolation
                            between the two middle values of an even count)
  interval(samples)         (lo, hi, rule) of one run's samples (steps or iterations): the
                            distribution-free 95% confidence interval of the median (order
                            statistics) from 6 samples on, min-max below 6 (no 95% interval
                            exists there); rule says which
  Measure                   a median with its interval, the count and the rule, e.g. over the
                            R rounds of a plan (min-max of the rounds' own medians)
  place(width)              the decimal place that keeps 2 significant digits of a spread
  fmt(value, place)         a number rounded to that place, thousands separated
"""
import math


def median(values):
    """The median as src/core/stats.cpp computes it (percentile 50 with linear interpolation);
    NaN for no values."""
    v = sorted(float(x) for x in values)
    if not v:
        return math.nan
    pos = 0.5 * (len(v) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def _ci_rank(n, alpha=0.05):
    """The largest j (1-based) with P(Binomial(n, 1/2) < j) <= alpha/2: [x_(j), x_(n+1-j)] then
    covers the median with probability >= 1 - alpha. 0 when no such j exists (n < 6)."""
    cum, j = 0.0, 0
    for i in range(n + 1):
        # P(B <= i), in logs: 2**n overflows a float beyond n = 1023 iterations
        cum += math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) - n * math.log(2))
        if cum > alpha / 2:
            break
        j = i + 1
    return j


def interval(samples):
    """(lo, hi, rule) of one run's samples: the 95% confidence interval of their median by order
    statistics ('95% CI of the median over N') when there are 6 or more, else their min-max
    ('min-max over N'; one sample has none); (nan, nan, 'no samples') without any. NaNs (not
    run) are left out."""
    v = sorted(float(x) for x in samples if not math.isnan(float(x)))
    n = len(v)
    if n == 0:
        return math.nan, math.nan, "no samples"
    if n == 1:
        return v[0], v[0], "no spread (1 sample)"
    j = _ci_rank(n)
    if j >= 1:
        return v[j - 1], v[n - j], f"95% CI of the median over {n}"
    return v[0], v[-1], f"min-max over {n}"


class Measure:
    """A median with its interval [lo, hi]: over rounds (n = rounds, min-max of their medians)
    or within one run (interval() of its samples). rule names it for the reader."""

    def __init__(self, med, lo, hi, n, rule):
        self.med, self.lo, self.hi, self.n, self.rule = float(med), float(lo), float(hi), int(n), rule

    @classmethod
    def of_rounds(cls, medians, one_run=None):
        """R >= 2 rounds: the median of the rounds' medians and their min-max. One round: its
        median with one_run's (lo, hi, rule) (its steps' or iterations' interval)."""
        medians = [float(m) for m in medians]
        if len(medians) >= 2:
            return cls(median(medians), min(medians), max(medians), len(medians),
                       f"min-max over {len(medians)} rounds")
        lo, hi, rule = one_run if one_run is not None else (medians[0], medians[0], "one value")
        return cls(medians[0], lo, hi, 1, "1 round: " + rule)

    def inverse(self, scale):
        """The same measurement as a rate scale / t (tokens/s from step time): the interval's ends
        swap."""
        return Measure(scale / self.med, scale / self.hi, scale / self.lo, self.n, self.rule)

    def scaled(self, k):
        return Measure(self.med * k, self.lo * k, self.hi * k, self.n, self.rule)

    @property
    def width(self):
        return self.hi - self.lo

    def overlaps(self, other):
        return not (self.lo > other.hi or other.lo > self.hi)

    def __repr__(self):
        return f"Measure({self.med!r}, {self.lo!r}, {self.hi!r}, n={self.n}, {self.rule!r})"


def place(width, value=None, digits=3):
    """The decimal place (a power of ten's exponent) a number is printed to: the one that keeps
    2 significant digits of its spread's width, but never coarser than the value's own first
    digit (a spread wider than the value still prints 1.3, not 0); without a spread (width 0 or
    unknown), `digits` significant digits of the value."""
    own = None if value is None or math.isnan(value) or value == 0 else math.floor(math.log10(abs(value)))
    if width is not None and not math.isnan(width) and width > 0:
        p = math.floor(math.log10(width)) - 1
        return p if own is None else min(p, own)
    return 0 if own is None else own - (digits - 1)


def fmt(value, p):
    """value rounded to 10**p, with thousands separators ('12,300', '5.31', '0.0042')."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if p >= 0:
        return f"{round(value / 10 ** p) * 10 ** p:,.0f}"
    return f"{value:,.{-p}f}"


def fmt_measure(m, k=1.0, p=None):
    """'median (lo-hi)' of m x k, rounded to its own spread's precision (or to place p)."""
    if m is None:
        return "-"
    p = place(m.width * k, m.med * k) if p is None else p
    if m.width <= 0:
        return fmt(m.med * k, p)
    return f"{fmt(m.med * k, p)} ({fmt(m.lo * k, p)}-{fmt(m.hi * k, p)})"
