"""meshbench.plot_fits: scripts/calibrate --plot's figures. fits.png: one panel per collective,
per fit the measured times as markers and the fitted segments as lines over their ranges
(dotted across the gaps between them, breakpoints as thin vertical lines), log-log like
scripts/plot's latency.png. fit-errors.png: per fit the in-sample relative residual (line)
and the held-out error (markers) against size, with the target as a dashed line.
matplotlib (Agg) is imported when called.
"""
import math
import os

import numpy as np

from . import tables
from .calibrate import KEY
from .plot_collectives import _panels, _size_axis


def _labeller(fits):
    """label(fit) naming the key columns whose values differ between the fits of one panel."""
    per = {}
    for kf in fits:
        per.setdefault(kf.key[0], []).append(dict(zip(KEY, kf.key)))
    need = set()
    for rows in per.values():
        need |= set(tables.distinguishing(rows, list(KEY[1:])))
    cols = [c for c in KEY[1:] if c in need]

    def label(kf):
        d = dict(zip(KEY, kf.key))
        parts = [f"{d[c]} ranks" if c == "group_size" else str(d[c] or "untagged") for c in cols]
        return " ".join(parts) or (d["tag"] or d["backend"])
    return label


def _by_collective(fits):
    out = {}
    for kf in fits:
        out.setdefault(kf.key[0], []).append(kf)
    return dict(sorted(out.items()))


def _figure(plt, groups, draw, ylabel, legend_size, extra=None):
    """One panel per collective: draw(ax, kf, pos) for each of its fits (pos: the sizes > 0),
    then extra(ax), the log axes, the titles and the legend."""
    fig, axes = _panels(plt, len(groups))
    for ax, (coll, kfs) in zip(axes, groups.items()):
        sizes = []
        for kf in kfs:
            pos = kf.n > 0
            draw(ax, kf, pos)
            sizes += list(kf.n[pos])
        if extra:
            extra(ax)
        ax.set_yscale("log")
        _size_axis(ax, sizes or [1, 2])
        ax.set_title(coll)
        ax.set_xlabel("message size (bytes, nccl-tests S)")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=legend_size)
    return fig


def _save(plt, fig, title, path):
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_fits(fits, out_dir, target):
    """Write fits.png and fit-errors.png into out_dir; returns their paths."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(out_dir, exist_ok=True)
    label = _labeller(fits)
    colors = {lab: f"C{i % 10}" for i, lab in enumerate(sorted({label(kf) for kf in fits}))}
    groups = _by_collective(fits)

    def fit_lines(ax, kf, pos):
        c = colors[label(kf)]
        ax.plot(kf.n[pos], kf.t[pos] * 1e6, "o", ms=3, color=c, label=f"{label(kf)} ({len(kf.segs)} seg)")
        for j, g in enumerate(kf.segs):
            lo = max(g.lo, 1)
            x = np.geomspace(lo, max(g.hi, lo + 1), 60)
            ax.plot(x, (g.alpha + g.beta * x) * 1e6, "-", lw=1.2, color=c)
            if j + 1 < len(kf.segs):  # across the gap, each segment as far as it is picked
                nxt = kf.segs[j + 1]
                mid = math.sqrt(max(g.hi, 1) * nxt.lo)
                xa, xb = np.geomspace(max(g.hi, 1), mid, 10), np.geomspace(mid, nxt.lo, 10)
                ax.plot(xa, (g.alpha + g.beta * xa) * 1e6, ":", lw=1, color=c)
                ax.plot(xb, (nxt.alpha + nxt.beta * xb) * 1e6, ":", lw=1, color=c)
                ax.axvline(mid, color=c, lw=0.6, alpha=0.5)

    def errors(ax, kf, pos):
        c = colors[label(kf)]
        # Floored at 0.1%: a line through two points fits them exactly.
        ax.plot(kf.n[pos], np.maximum(np.abs(kf.resid[pos]), 1e-3) * 100, "-", lw=0.8, color=c,
                label=f"{label(kf)}: fit")
        ho = pos & np.isfinite(kf.heldout)
        ax.plot(kf.n[ho], np.maximum(kf.heldout[ho], 1e-3) * 100, "x", ms=4, color=c,
                label=f"{label(kf)}: held out")

    fig = _figure(plt, groups, fit_lines, "time (us): measured (o), fit (-)", 7)
    written = [_save(plt, fig, "collective fits: t(n) = alpha + n / B per segment", os.path.join(out_dir, "fits.png"))]
    fig = _figure(plt, groups, errors, "relative error (%)", 6,
                  extra=lambda ax: ax.axhline(target * 100, color="k", ls="--", lw=0.8))
    written.append(_save(plt, fig, f"fit residuals (-) and held-out errors (x), |t_fit/t - 1| floored at 0.1%; "
                                   f"dashed: the {target:.0%} target", os.path.join(out_dir, "fit-errors.png")))
    return written
