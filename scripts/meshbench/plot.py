"""meshbench.plot: scripts/plot's command once its flags are parsed (run): read the files
(meshbench.reader), filter, and write the step figures (plot_steps), the collective figures
(plot_collectives) or with --timeline the pipeline timeline (plot_timeline). matplotlib (Agg)
is imported here, on the first run, not on import. HELP is the command's --help text.
"""
import os
import sys

from . import plans, reader, tables
from .plot_collectives import plot_collectives
from .plot_steps import plot_steps
from .plot_timeline import timeline_main

HELP = """scripts/plot: PNG figures of meshbench collective results (matplotlib, no display needed).

  busbw.png        bus bandwidth against message size, one panel per collective, one line per
                   series (the columns that differ between runs: fabric tag, backend, group,
                   ranks, placement ...), log-log axes
  latency.png      median time against size, same panels and lines, with a shaded band from
                   the median to the p99 of the slowest rank's time (the percentile band)
  heatmap-*.png    one per run and collective: per-rank median time at each size divided by
                   the fastest rank's, so a straggler shows as a bright row; the colour bar
                   reads plain ratios (1x, 1.2x, 1.5x)

  memory.png       step_bench runs: the peak memory per category (params, grads, optimizer,
                   activations, buffers) of each plan's worst rank (the rank whose parts add up
                   to the most, named under the bar: GPipe's last stage) as stacked bars, one
                   bar per plan labelled by plan (schedule included), that rank's analytic
                   total of the same five categories marked on each bar

  steps.png        step_bench runs: one stacked bar per plan (its rounds), best median
                   tokens/s first, labelled by plan: step/time_split's compute, exposed
                   communication per dimension, bubble and other, each the mean over ranks
                   (and rounds) of a rank's seconds per step, divided by the global batch's
                   tokens: microseconds per token, so plans at different global batches
                   compare; tokens/s (median of the rounds) on top. Plans from files without
                   step/time_split are left out (stderr says so): nothing is re-derived
  scaling.png      step_bench runs: tokens/s (median of the rounds, bars over their spread)
                   against ranks, one line per family of plans (the same model, tag and plan
                   but for the degree that grows: --scale-dim, default dp), a dashed line from
                   each family's smallest run for linear scaling; written when a family has two
                   or more rank counts

  timeline.png     --timeline (step_bench runs with --mesh pp=P; up to 8, e.g. GPipe against
                   1F1B): the last timed step of each run on one shared time axis, a panel per
                   run labelled by plan, a row per stage: forward (solid) and backward
                   (hatched) blocks coloured by micro-batch and labelled "3" or "3c1" (chunk 1),
                   sends marked by a triangle at their posting and receives by a bar from
                   posting to completion, each rank's bubble beside its row; under them the
                   stored activations in MiB (step/activation_slots bytes) per run and rank

It reads files with scripts/meshbench/reader.py (the reader scripts/report uses; same filters:
--where COL=VAL) and never recomputes the binaries' numbers except the per-rank medians of the
stored samples.

  scripts/plot results/1234/ -o results/1234/plots
  scripts/plot shm.h5 tcp.h5 --where collective=all_reduce --where placement=out-of-place
  scripts/plot z0.h5 z1.h5 z2.h5 z3.h5 -o plots   # step runs: memory.png, steps.png
  scripts/plot sweep/ --where tag=shm -o plots    # plans: steps.png, scaling.png (dp grows)
  scripts/plot --timeline gpipe.h5 1f1b.h5 -o plots   # pipeline runs on one time axis: timeline.png

Exit codes: 0 figures written, 1 nothing to plot / unreadable file, 2 bad usage or a file whose
content is not the schema (docs/report.md).
"""


def run(args):
    """scripts/plot after its flags are parsed; prints each file written; returns the exit code
    (0 figures written, 1 nothing to plot or an unreadable file, 2 bad usage)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    try:
        if args.timeline:
            return timeline_main(plt, args)
        rows, bad = reader.load_collectives(args.paths, with_samples=True, who="plot")
        runs, bad_steps = reader.load_steps(args.paths, quiet=True, who="plot")
    except reader.FormatError as e:
        print(f"plot: {e}", file=sys.stderr)
        return 2
    bad = sorted(set(bad) | set(bad_steps))
    steps = plans.plan_rows(runs)
    try:
        rows = tables.apply_filters(rows, args.where)
        steps = tables.apply_filters(steps, args.where)
    except ValueError as e:
        print(f"plot: {e}", file=sys.stderr)
        return 2
    if not rows and not steps:
        print("plot: nothing to plot (no collective rows or step runs after filters)", file=sys.stderr)
        return 1
    os.makedirs(args.out, exist_ok=True)
    written = []
    title = (args.title + ": " if args.title else "")
    written += plot_steps(plt, steps, args, title)
    if rows:
        written += plot_collectives(plt, np, rows, args, title)
    for p in written:
        print(p)
    return 1 if bad else 0
