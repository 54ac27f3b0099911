"""meshbench.plot_steps: scripts/plot's step_bench figures: memory.png (each plan's worst rank's
peak per category, stacked, with its analytic total), steps.png (one stacked bar per plan, best
median tokens/s first: step/time_split's compute, exposed communication per dimension, bubble
and other in microseconds per token) and scaling.png (tokens/s against ranks per family of
plans as one degree grows). Nothing here re-derives what the binary did not store.
"""
import math
import os
import sys

from . import plans, reader, spread

def plan_labels(steps):
    """A bar's or line's label: the plan (degrees, schedule, vpp, zero, m), plus the tag, model and
    global batch where they differ between the rows."""
    extra = [c for c in ("tag", "model") if len({r.get(c) for r in steps}) > 1]
    gb = len({r.get("global_batch") for r in steps}) > 1
    return [" ".join([r.get("plan", "")] + [str(r.get(c) or "") for c in extra]
                     + ([f"gb={r.get('global_batch')}"] if gb else [])) for r in steps]


def latest_per_round_key(steps):
    """One run per plan and tag (the latest of its rounds), in the order given."""
    seen = {}
    for r in sorted(steps, key=lambda r: (r.get("start_time", ""), r.get("run_id", ""))):
        seen[plans.round_key(r)] = r
    keep = {id(r) for r in seen.values()}
    return [r for r in steps if id(r) in keep]


def set_title(fig, ax, text, fontsize=9):
    """A title wrapped to the figure's width (about 15 characters per inch at 9 pt), so that a
    long one is never clipped at both sides (steps.png's was); savefig's bbox_inches="tight"
    keeps the legend beside the axes in the file too."""
    import textwrap
    width = max(30, int(fig.get_figwidth() * 15))
    ax.set_title("\n".join(textwrap.wrap(text, width)), fontsize=fontsize)


def plot_memory(plt, steps, path, title):
    """Stacked bars of the measured peak per category of each run's worst rank (the rank whose
    five parts add up to the most, named under its bar), one bar per plan (its latest round),
    labelled by plan; a black tick marks that rank's analytic total of the same categories
    (none where a category has no formula)."""
    steps = [r for r in steps if "mem_worst.total" in r]
    steps = sorted(latest_per_round_key(steps), key=lambda r: (r.get("zero_stage") or 0, r.get("dp") or 1,
                                                               r.get("microbatches") or 1, r.get("start_time", "")))
    labels = [f"{lab}\n(rank {r['mem_worst_rank']})" for lab, r in zip(plan_labels(steps), steps)]
    top = max(r.get("mem_worst.total", 0.0) for r in steps)
    scale, unit = (1 << 20, "MiB") if top >= 1 << 20 else (1 << 10, "KiB") if top >= 1 << 10 else (1, "B")
    fig, ax = plt.subplots(figsize=(max(5.5, 1.3 * len(steps) + 3.5), 4.4))
    x = list(range(len(steps)))
    bottom = [0.0] * len(steps)
    for i, cat in enumerate(reader.MEMORY_PARTS):
        h = [r.get(f"mem_worst.{cat}", 0.0) / scale for r in steps]
        ax.bar(x, h, bottom=bottom, width=0.6, label=cat, color=f"C{i}")
        bottom = [b + v for b, v in zip(bottom, h)]
    marked = False
    for xi, r in zip(x, steps):
        a = r.get("mem_worst_analytic.total", math.nan)
        if not math.isnan(a):
            ax.plot([xi - 0.38, xi + 0.38], [a / scale] * 2, color="black", linewidth=2,
                    label=None if marked else "analytic total")
            marked = True
    ax.set_xticks(x)
    ax.set_xticklabels(labels, rotation=20, fontsize=8)
    ax.set_ylabel(f"peak bytes on the worst rank ({unit})")
    set_title(fig, ax, title + "memory per category on each plan's worst rank (measured, stacked; the rank whose "
              "parts add up to the most) and the formula's total")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the bars, not on them
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def step_bar_parts(groups):
    """[(column, legend name)] of steps.png: step/time_split's categories (compute, exposed per
    dimension, bubble, other), in that order."""
    dims = plans.exposed_dims(groups)
    return [("time.compute", "compute")] + [(f"time.exposed.{d}", f"exposed {d}") for d in dims] + \
        [("time.bubble", "bubble"), ("time.other", "other")]


def plot_step_bars(plt, groups, path, title):
    """One stacked bar per plan (groups from plans.plan_groups, best median tokens/s first): its
    step/time_split per token, in microseconds: compute, exposed communication per dimension,
    bubble and other, each the median over rounds of the mean over ranks of a rank's seconds per
    step, divided by the global batch's tokens; they add up to the bar (about the mean rank's
    step per token: each part is its own median).
    tokens/s (median of the rounds) on top."""
    parts = step_bar_parts(groups)
    fig, ax = plt.subplots(figsize=(max(5.5, 1.2 * len(groups) + 3.5), 4.4))
    x = list(range(len(groups)))
    bottom = [0.0] * len(groups)
    for i, (col, name) in enumerate(parts):
        h = [1e6 * (g.get(col) or 0.0) / g["tokens_per_step"] for g in groups]
        if any(h):
            colour = "0.7" if col == "time.bubble" else "0.88" if col == "time.other" else f"C{i}"
            ax.bar(x, h, bottom=bottom, width=0.6, label=name, color=colour)
        bottom = [b + v for b, v in zip(bottom, h)]
    for xi, top, g in zip(x, bottom, groups):
        t = g["tokens"]
        ax.text(xi, top, f"{spread.fmt(t.med, spread.place(t.width, t.med))} tok/s", ha="center", va="bottom",
                fontsize=7)
    ax.set_xticks(x)
    ax.set_xticklabels(plan_labels(groups), rotation=20, fontsize=8)
    ax.set_ylabel("µs per token (step/time_split,\nmedian over rounds)")
    set_title(fig, ax, title + "time per token per plan: compute, exposed communication per dimension, bubble, "
              "other (best median tokens/s first)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def scaling_families(groups, dim):
    """{family: [groups sorted by ranks]} for families with two or more rank counts (groups are
    plans.plan_groups: a plan's rounds); the best median tokens/s where a family has the same
    rank count twice (two global batches)."""
    fams = {}
    for g in groups:
        if g.get("tokens") is None:
            continue
        by = fams.setdefault(plans.family(g, dim), {})
        if g.get("ranks") not in by or g["tokens"].med > by[g["ranks"]]["tokens"].med:
            by[g.get("ranks")] = g
    return {k: [v[n] for n in sorted(v)] for k, v in fams.items() if len(v) >= 2}


def plot_scaling(plt, fams, dim, path, title):
    """tokens/s against ranks, one line per family (median of the rounds, bars from lo to hi),
    dashed linear scaling from its first run."""
    fig, ax = plt.subplots(figsize=(7.5, 4.4))
    extra = [i for i in (0, 1) if len({k[i] for k in fams}) > 1]
    ranks = set()
    for i, (key, rows) in enumerate(sorted(fams.items())):
        xs = [g["ranks"] for g in rows]
        ys = [g["tokens"].med for g in rows]
        err = [[g["tokens"].med - g["tokens"].lo for g in rows], [g["tokens"].hi - g["tokens"].med for g in rows]]
        ranks |= set(xs)
        label = " ".join([f"{dim}=N" + ("" if key[2] == "single" else f": {key[2]}")] + [str(key[j]) for j in extra])
        ax.errorbar(xs, ys, yerr=err, marker="o", color=f"C{i % 10}", label=label, capsize=3)
        ax.plot(xs, [ys[0] * x / xs[0] for x in xs], linestyle="--", color=f"C{i % 10}", alpha=0.5)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(ranks))
    ax.set_xticklabels([str(n) for n in sorted(ranks)])
    ax.set_xlabel(f"ranks ({dim} grows)")
    ax.set_ylabel("tokens/s (global batch; median of rounds,\nbars: spread)")
    set_title(fig, ax, title + f"scaling with {dim}: measured (solid), linear from the smallest run (dashed)")
    ax.legend(fontsize=7)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def plot_steps(plt, steps, args, title):
    """memory.png, steps.png and scaling.png from the step rows; the paths written."""
    written = []
    mem = [r for r in steps if "mem_worst.total" in r]
    if mem:
        written.append(os.path.join(args.out, "memory.png"))
        plot_memory(plt, mem, written[-1], title)
    groups = [g for g in plans.plan_groups(steps) if g["tokens"] is not None]
    split = [g for g in groups if "time.step" in g and g.get("tokens_per_step")]
    if len(split) < len(groups):
        old = [g for g in groups if g not in split]
        print(f"plot: steps.png leaves out {len(old)} plan(s) written before step/time_split "
              f"({', '.join(str(g.get('plan')) for g in old[:4])}): their split is not stored and not re-derived",
              file=sys.stderr)
    if split:
        written.append(os.path.join(args.out, "steps.png"))
        plot_step_bars(plt, split, written[-1], title)
    if groups:
        fams = scaling_families(groups, args.scale_dim)
        if fams:
            written.append(os.path.join(args.out, "scaling.png"))
            plot_scaling(plt, fams, args.scale_dim, written[-1], title)
        else:
            print(f"plot: no scaling.png: no family of plans with two or more rank counts as {args.scale_dim} "
                  "grows", file=sys.stderr)
    return written
