"""meshbench.plot_collectives: scripts/plot's collective figures: busbw.png and latency.png (one
panel per collective, one line per series: the columns that differ between runs; log-log axes;
latency shaded from the median to the p99) and heatmap-*.png (per run and collective: each
rank's median time over the stored samples at each size / the fastest rank's). matplotlib's
pyplot and numpy are passed in (plt, np): importing this module does not import matplotlib.
"""
import math
import os
import re
import sys

from . import tables

# Columns that can tell two series apart, in the order their values appear in a legend.
SERIES_COLS = ["tag", "backend", "mem", "ranks", "nodes", "group", "mesh", "placement", "dtype",
               "redop", "timing"]


def series_labeller(rows):
    """label(row) naming only the columns whose values differ across all rows (stable colours)."""
    # Within one collective's panel: the columns that tell its lines apart, minimal and ordered.
    per_coll = {}
    for r in rows:
        per_coll.setdefault(r["collective"], []).append(r)
    need = set()
    for crows in per_coll.values():
        need |= set(tables.distinguishing(crows, ["bytes"] + SERIES_COLS)) - {"bytes"}
    varying = [c for c in SERIES_COLS if c in need]

    def label(r):
        parts = []
        for c in varying:
            v = r.get(c)
            parts.append(f"{v} ranks" if c == "ranks" else f"{v} nodes" if c == "nodes" else str(v))
        return " ".join(parts) or (r.get("tag") or r.get("backend") or "run")
    return label


def split_series(rows, label):
    """{label: rows sorted by size}; a size measured twice in one series keeps the latest run."""
    out = {}
    for r in sorted(rows, key=lambda r: r.get("start_time", "")):
        out.setdefault(label(r), {})[r["bytes"]] = r
    return {k: [v[b] for b in sorted(v)] for k, v in sorted(out.items())}


def _size_axis(ax, sizes):
    """log2 x axis with at most ~10 ticks labelled 8, 1K, 64M over the sizes present."""
    from matplotlib.ticker import FuncFormatter, LogLocator
    ax.set_xscale("log", base=2)
    lo, hi = int(math.log2(max(1, min(sizes)))), int(math.ceil(math.log2(max(2, max(sizes)))))
    step = max(1, (hi - lo + 9) // 10)
    ax.set_xticks([2 ** p for p in range(lo, hi + 1, step)])
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: tables.fmt_size(v)))
    ax.tick_params(axis="x", labelrotation=45, labelsize=7)
    ax.yaxis.set_major_locator(LogLocator(base=10))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.grid(True, which="major", alpha=0.3)


def _panels(plt, n):
    cols = min(3, n)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.9 * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def by_collective(rows):
    out = {}
    for r in rows:
        out.setdefault(r["collective"], []).append(r)
    return dict(sorted(out.items()))


def plot_lines(plt, rows, path, metric, title):
    colls = by_collective(rows)
    fig, axes = _panels(plt, len(colls))
    label = series_labeller(rows)
    colors = {lab: f"C{i % 10}" for i, lab in enumerate(sorted({label(r) for r in rows}))}
    for ax, (coll, crows) in zip(axes, colls.items()):
        for lab, srows in split_series(crows, label).items():
            x = [r["bytes"] for r in srows]
            if metric == "busbw":
                # A busbw of 0 (all_to_allv whose routing sent nothing off-rank: total_bytes 0) has no
                # place on a log axis: left out (a gap in the line), and the report notes the row.
                y = [r["busbw"] if r["busbw"] > 0 else float("nan") for r in srows]
                ax.plot(x, y, marker="o", ms=3, label=lab, color=colors[lab])
            else:
                y = [r["t_median"] * 1e6 for r in srows]
                hi = [r["t_p99"] * 1e6 for r in srows]
                ax.plot(x, y, marker="o", ms=3, label=lab, color=colors[lab])
                ax.fill_between(x, y, hi, alpha=0.2, color=colors[lab], linewidth=0)
        ax.set_yscale("log")
        _size_axis(ax, [r["bytes"] for r in crows])
        ax.set_title(coll)
        ax.set_xlabel("message size (bytes, nccl-tests S)")
        ax.set_ylabel("bus bandwidth (GB/s)" if metric == "busbw" else "time (us): median, band to p99")
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def ratio_ticks(cb, vmax):
    """Plain ratio labels on a log colour bar from 1 to vmax ('1.25x', not matplotlib's
    '1.25x10^0'): about five ticks spaced evenly in log, each rounded to 2 significant digits,
    and no minor labels."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator
    n = 5
    ticks = sorted({float(f"{vmax ** (i / (n - 1)):.2g}") for i in range(n)} | {1.0})
    ticks = [t for t in ticks if 1.0 <= t <= vmax * 1.0001]
    cb.ax.yaxis.set_major_locator(FixedLocator(ticks))
    cb.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    cb.ax.yaxis.set_minor_locator(NullLocator())
    cb.ax.yaxis.set_minor_formatter(NullFormatter())
    return ticks


def plot_heatmap(plt, np, rows, path):
    """rows: one run's one collective group, with samples [iters, ranks]."""
    rows = sorted(rows, key=lambda r: r["bytes"])
    med = []
    for r in rows:
        s = np.asarray(r["samples"], dtype=float)
        med.append(np.nanmedian(s, axis=0))  # per rank, over iterations
    m = np.array(med).T  # [ranks, sizes]
    rel = m / np.nanmin(m, axis=0, keepdims=True)
    n_ranks, n_sizes = rel.shape
    fig, ax = plt.subplots(figsize=(max(5.0, 0.5 * n_sizes + 2.5), max(2.6, 0.35 * n_ranks + 1.8)))
    # Log colours: a 1.3x straggler stays visible next to a 100x cold first call.
    from matplotlib.colors import LogNorm
    vmax = max(1.1, float(np.nanmax(rel)))
    im = ax.imshow(rel, aspect="auto", cmap="magma", interpolation="nearest",
                   norm=LogNorm(vmin=1.0, vmax=vmax))
    ax.set_xticks(range(n_sizes))
    ax.set_xticklabels([tables.fmt_size(r["bytes"]) for r in rows], rotation=45, fontsize=7)
    ax.set_yticks(range(n_ranks))
    ax.set_yticklabels([str(i) for i in range(n_ranks)], fontsize=7)
    ax.set_xlabel("message size")
    ax.set_ylabel("rank")
    r0 = rows[0]
    ax.set_title(f"{r0['collective']} {r0.get('tag') or ''} {r0['placement']} {r0['group']}: "
                 f"per-rank median time / fastest rank", fontsize=9)
    cb = fig.colorbar(im, ax=ax, label="x fastest rank (log scale)")
    ratio_ticks(cb, vmax)
    if n_ranks * n_sizes <= 400:
        for i in range(n_ranks):
            for j in range(n_sizes):
                ax.text(j, i, f"{rel[i, j]:.2f}", ha="center", va="center", fontsize=6,
                        color="white" if rel[i, j] < vmax ** 0.6 else "black")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def slug(text):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")


def plot_collectives(plt, np, rows, args, title):
    written = []
    p = os.path.join(args.out, "busbw.png")
    plot_lines(plt, rows, p, "busbw", title + "bus bandwidth vs message size")
    written.append(p)
    p = os.path.join(args.out, "latency.png")
    plot_lines(plt, rows, p, "latency", title + "time vs message size (median, band to p99)")
    written.append(p)

    groups = {}
    for r in rows:
        if "samples" in r:
            groups.setdefault((r["file"], r["run_id"], r["collective"], r["dtype"], r["redop"],
                               r["placement"], r["group"]), []).append(r)
    for i, (k, grows) in enumerate(sorted(groups.items())):
        if i >= args.heatmaps:
            if args.heatmaps > 0:
                print(f"plot: {len(groups) - args.heatmaps} more heat maps left out (--heatmaps)", file=sys.stderr)
            break
        r0 = grows[0]
        name = slug(f"heatmap-{r0.get('tag') or 'untagged'}-{r0['ranks']}r-{r0['collective']}-"
                    f"{r0['placement']}-{r0['group']}-{r0['run_id'].split('-')[0]}") + ".png"
        p = os.path.join(args.out, name)
        if p in written:
            p = p[:-4] + f"-{i}.png"
        plot_heatmap(plt, np, grows, p)
        written.append(p)
    return written
