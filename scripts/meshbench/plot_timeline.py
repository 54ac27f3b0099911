"""meshbench.plot_timeline: scripts/plot --timeline: pipeline runs (step_bench --mesh pp=P; up
to MAX_TIMELINE_RUNS) on one shared time axis, timeline.png: each run's last timed step, a row
per rank, labelled with its pipeline stage and its place in its other groups (topology/groups),
with forward and backward blocks per micro-batch, sends and receives, each rank's bubble, and
the stored activations per rank below.
"""
import os
import sys

from . import plans, reader, tables
from .plot_steps import plan_labels

def timeline_step(run):
    """The last timed step of a pipeline run: (its passes, its activation samples, t0)."""
    passes = run["passes"]
    step = max(p["step"] for p in passes)
    passes = [p for p in passes if p["step"] == step]
    slots = [s for s in run["activation_slots"] if s["step"] == step]
    return passes, slots, min(p["t_start"] for p in passes)


PLACE_DIMS = ("tp", "cp", "ep", "dp")  # a rank's other coordinates, after its stage


def stage_rows(run, ranks):
    """The timeline's rows: [(rank, label)] in stage order. A rank's stage is its place in its
    pipeline group, and its index in every other group of more than one rank is its place
    there, all read from the run's topology/groups ("stage 0 · dp 1 (rank 2)"). Without a
    topology, a run whose ranks are all one pipeline (pp = its ranks) has rank order for stage
    order; otherwise a row says only its rank, never a stage it cannot know."""
    place = {r: {} for r in ranks}
    for dim, members in run.get("groups") or []:
        if (dim == "pp" or dim in PLACE_DIMS) and len(members) > 1:
            for i, r in enumerate(members):
                if r in place:
                    place[r].setdefault(dim, i)
    degrees = (run.get("attrs") or {}).get("degrees")
    if not run.get("groups") and isinstance(degrees, dict) and degrees.get("pp") == len(ranks):
        for i, r in enumerate(sorted(ranks)):
            place[r]["pp"] = i

    def key(r):
        return (place[r].get("pp", 1 << 30),) + tuple(place[r].get(d, 0) for d in reversed(PLACE_DIMS)) + (r,)
    rows = []
    for r in sorted(ranks, key=key):
        if "pp" not in place[r]:
            rows.append((r, f"rank {r}"))
            continue
        where = [f"stage {place[r]['pp']}"] + [f"{d} {place[r][d]}" for d in PLACE_DIMS if d in place[r]]
        rows.append((r, " \u00b7 ".join(where) + f" (rank {r})"))
    return rows


def plot_timeline(plt, items, path, title):
    """Pipeline runs on one shared time axis (each run's last timed step from its own first
    pass): one panel per run, a row per rank in stage order (stage_rows), forward (solid) and
    backward (hatched) blocks coloured by micro-batch and labelled "3" or "3c1" (chunk 1), sends marked by a triangle
    at their posting and receives by a bar from posting to completion, each rank's bubble
    (step/pipeline: its share of the rank's step); under them every run's stored activations
    per rank in MiB (step/activation_slots bytes). items: [(run, label)]."""
    n_rows = [len({p["rank"] for p in timeline_step(run)[0]}) for run, _ in items]
    heights = [max(1, n) for n in n_rows] + [1.8]
    fig, axes = plt.subplots(len(items) + 1, 1, figsize=(12, 1.2 + 0.8 * sum(n_rows) + 0.5 * len(items) + 2.4),
                             sharex=True, gridspec_kw={"height_ratios": heights}, squeeze=False)
    axes = list(axes[:, 0])
    mem_ax = axes[-1]
    styles = ["-", "--", ":", "-."]
    for k, ((run, label), ax) in enumerate(zip(items, axes)):
        passes, slots, t0 = timeline_step(run)
        rows = stage_rows(run, {p["rank"] for p in passes})
        ranks = [r for r, _ in rows]
        ms = lambda t, t0=t0: (t - t0) * 1e3  # noqa: E731
        m = int(run["attrs"].get("microbatches", 1))
        cmap = plt.get_cmap("tab10" if m <= 10 else "tab20")
        for p in passes:
            y = ranks.index(p["rank"])
            ph = p["phase"]
            if ph in ("F", "B"):
                ax.barh(y, ms(p["t_end"]) - ms(p["t_start"]), left=ms(p["t_start"]), height=0.6,
                        color=cmap(p["microbatch"] % cmap.N), edgecolor="black", linewidth=0.4,
                        hatch="//" if ph == "B" else None)
                text = f"{p['microbatch']}" + (f"c{p['chunk']}" if p["chunk"] else "")
                ax.text((ms(p["t_start"]) + ms(p["t_end"])) / 2, y, text, ha="center", va="center", fontsize=7)
            elif ph == "S":
                ax.plot(ms(p["t_start"]), y - 0.38, marker="^", color="black", markersize=4)
            elif ph == "R":
                ax.plot([ms(p["t_start"]), ms(p["t_end"])], [y + 0.38, y + 0.38], color="red", linewidth=1.5)
        ax.set_yticks(range(len(ranks)))
        ax.set_yticklabels([lab for _, lab in rows], fontsize=8)
        ax.set_ylim(len(ranks) - 0.5, -0.5)
        bubble = {p["rank"]: p for p in run["pipeline"]}
        split = bool(run.get("time_split"))
        for i, r in enumerate(ranks):
            if r in bubble and split:
                ax.text(1.002, i, f"bubble {100 * bubble[r]['bubble']:.0f}%", transform=ax.get_yaxis_transform(),
                        va="center", fontsize=8)
        theory = run["pipeline"][0]["bubble_theory"] if run["pipeline"] else float("nan")
        ax.set_title(f"{label}: theory bubble {100 * theory:.0f}%" + ("" if split else
                     " (file without step/time_split: no measured bubble shown)"), fontsize=9, loc="left")
        for j, r in enumerate(ranks):
            pts = sorted((s["t"], s["bytes"]) for s in slots if s["rank"] == r)
            if pts:
                mem_ax.step([ms(t) for t, _ in pts], [b / (1 << 20) for _, b in pts], where="post",
                            color=f"C{k % 10}", linestyle=styles[j % len(styles)], label=f"{label}: rank {r}")
    axes[0].figure.suptitle(title + "pipeline, last timed step of each run on a shared time axis (from its first "
                            "pass): forward solid, backward hatched, colour = micro-batch; ^ send posted, "
                            "red = receive (posted to done);\nright: each rank's bubble, its share of the rank's "
                            "step (step/pipeline, mean over the timed steps)", fontsize=9)
    mem_ax.set_ylabel("stored activations\n(MiB)")
    mem_ax.set_xlabel("time in the step (ms)")
    mem_ax.legend(fontsize=7, ncol=2)
    mem_ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


MAX_TIMELINE_RUNS = 8


def timeline_main(plt, args):
    """--timeline: every pipeline run under the paths (after --where) on one shared time axis,
    timeline.png; more than MAX_TIMELINE_RUNS is bad usage (narrow with --where)."""
    runs, bad = reader.load_steps(args.paths, quiet=True, who="plot")
    runs = [r for r in runs if r.get("passes")]
    rows = plans.plan_rows(runs)
    try:
        keep = {id(r) for r in tables.apply_filters(rows, args.where)}
    except ValueError as e:
        print(f"plot: {e}", file=sys.stderr)
        return 2
    pairs = [(run, r) for run, r in zip(runs, rows) if id(r) in keep]
    if not pairs:
        print("plot: --timeline: no pipeline run (step_bench --mesh pp=P) in " + " ".join(args.paths)
              + (" after filters" if args.where else ""), file=sys.stderr)
        return 1
    if len(pairs) > MAX_TIMELINE_RUNS:
        print(f"plot: --timeline: {len(pairs)} pipeline runs; at most {MAX_TIMELINE_RUNS} share one time axis "
              "(narrow with --where, e.g. --where plan=...)", file=sys.stderr)
        return 2
    labels = plan_labels([r for _, r in pairs])
    if len(set(labels)) < len(labels):  # rounds of one plan: told apart by run id
        labels = [f"{lab} ({r['run_id']})" for lab, (_, r) in zip(labels, pairs)]
    os.makedirs(args.out, exist_ok=True)
    title = (args.title + ": " if args.title else "")
    p = os.path.join(args.out, "timeline.png")
    plot_timeline(plt, [(run, lab) for (run, _), lab in zip(pairs, labels)], p, title)
    print(p)
    return 1 if bad else 0
