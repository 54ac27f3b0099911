"""meshbench.report: scripts/report's command once its flags are parsed (run): read the files
(meshbench.reader), add the sweep's failed points, then print the collective table
(report_collectives), the step table, plan table or step --compare (report_steps,
report_plans), or judge against a baseline (regression). HELP is the command's --help text.
"""
import os
import sys

from . import plans, reader
from .regression import parse_threshold, regression
from .report_collectives import collective_text, order_violations
from .report_format import to_csv, to_json
from .report_plans import plan_groups_json, plan_markdown, rank_groups, step_compare
from .report_predicted import has_predictions, predicted_text
from .report_steps import (sort_steps, step_all_columns, step_columns, step_markdown, step_notes, tp_table,
                           zero_side_by_side)
from .tables import apply_filters, parse_filter

HELP = """scripts/report: merge meshbench result files into tables (collectives and step_bench runs).

Reads any number of HDF5 files (or folders, searched for *.h5) written by the *_bench binaries
(layout: docs/results.md), one row per (run, collective, dtype, op, placement, group, size),
and prints Markdown, CSV or JSON. Filters by any column; compares two selections side by side.
It only reads: it never computes bandwidth itself (busbw/algbw are the binaries' numbers) and
it never changes a file. Files are read by scripts/meshbench/reader.py (shared with plot,
sweep and torch_step_bench.py).

For step_bench runs it prints a step table: one row per run with the strategy, degrees,
micro-batches, step time, tokens/s, MFU, exposed communication, bytes per (dim, kind) per rank
and step, bytes_match and rank 0's peak memory per category; runs that differ only in ZeRO stage
are shown side by side (one column per run, memory beside its formula). Runs that differ in
plan (degrees, order, schedule, vpp, micro-batches, global batch, ...), or several runs of one
plan (its rounds), get the plan table instead: one row per plan and tag, best median tokens/s
first, with the global batch, tokens/s and step time as the median of the rounds with their
spread, whether a plan is separable from the next, exposed communication per dimension and
the bubble from step/time_split, the worst stage's bubble, the peak memory over ranks, the
straggler, the dimensions whose groups cross nodes and the check (scripts/meshbench/plans.py;
docs/report.md "Reading the report"). Given a sweep folder, its failed step points
(points/*.json) are rows with their status. Runs made with step_bench --predict CAL.h5 add a
predicted against measured table: per plan the predicted and measured step time, tokens/s,
bubble (pipelines) and exposed communication per dimension, with the error predicted /
measured - 1, extrapolated predictions marked * (--table predicted: that table alone, also as
CSV/JSON). --compare on step runs pairs the same plans under A and B. --baseline OLD judges
PATHS against OLD by exit code (regression mode).

  scripts/report results/1234/                     # every run in that folder, Markdown
  scripts/report a.h5 b.h5 --format csv            # machine-readable, full precision, seconds/bytes
  scripts/report results/ --where collective=all_reduce --where 'bytes>=1M'
  scripts/report results/ --compare tag=shm tag=tcp   # B/A time ratio per size
  scripts/report results/ --expect-order tag=shm,tcp-lo,netns   # flag a slower fabric reading faster
  scripts/report z0.h5 z1.h5 z2.h5 z3.h5           # step_bench runs: the ZeRO stages side by side
  scripts/report zero/ --table steps -f csv        # the step table, every column
  scripts/report tp1.h5 tp2.h5 tp2sp.h5            # + one row per tensor-parallel degree
  scripts/report sweep/                            # plans: best tokens/s first, failed points too
  scripts/report sweep/ --compare tag=shm tag=tcp  # the same plans on two fabrics
  scripts/report sweep/ --table plans -f csv       # the plan ranking: median, spread, rounds
  scripts/report sweep/ --table predicted          # runs made with --predict: predicted against measured
  scripts/report new/ --baseline old/ --threshold 5%   # regression: exit 1 on a real slowdown

Exit codes: 0 ok, 1 no rows matched / unreadable file, 2 bad usage. With --baseline: 0 no match
is slower beyond the threshold and outside the noise, 1 one is (or nothing could be judged: no
match, an unreadable file; the message says which), 2 bad usage (a bad --threshold) or a file whose
content is not the schema (one line naming the file and the dataset).
"""


def step_text(args, steps):
    """(rows shown, text) of the step runs: --compare, the plan table when the runs differ in
    plan or a plan has several rounds (--table plans: that table as CSV/JSON), the ZeRO stages
    side by side when they differ only in that, else one row per run; in Markdown, runs made
    with --predict add the predicted against measured table (--table predicted: that alone)."""
    if args.compare:
        return step_compare(args, steps)
    if args.table == "predicted":
        if not has_predictions(steps):
            raise ValueError("--table predicted: none of the step runs holds a prediction (step/predicted: run "
                             "step_bench with --predict CAL.h5)")
        return steps, predicted_text(steps, args.format, args.columns.split(",") if args.columns else None)
    rows, text = step_text_tables(args, steps)
    if args.format == "md" and has_predictions(steps):
        text += "\n" + predicted_text(steps, "md")
    return rows, text


def step_text_tables(args, steps):
    """step_text without the predicted table."""
    if args.table == "plans":
        groups = plan_groups_json(rank_groups(steps))
        if args.format == "md":
            return steps, plan_markdown(steps) + tp_table(steps)
        cols = args.columns.split(",") if args.columns else list(dict.fromkeys(k for g in groups for k in g))
        return steps, to_csv(groups, cols) if args.format == "csv" else to_json(groups, cols)
    if args.format == "md":
        several = len({plans.plan_key(r) for r in steps}) > 1 or \
            len({plans.round_key(r) for r in steps}) < len(steps)
        if not args.columns and not zero_side_by_side(steps) and several:
            return steps, plan_markdown(steps) + tp_table(steps)
        steps = sort_steps(steps)
        cols = args.columns.split(",") if args.columns else step_columns(steps)
        return steps, step_markdown(steps, cols) + tp_table(steps) + step_notes(steps)
    steps = plans.sort_by_throughput(steps)
    cols = args.columns.split(",") if args.columns else step_all_columns(steps)
    return steps, to_csv(steps, cols) if args.format == "csv" else to_json(steps, cols)


def check_options(args):
    """The --baseline threshold (None without --baseline); ValueError on bad usage."""
    threshold = None
    if args.threshold is not None and not args.baseline:
        raise ValueError("--threshold needs --baseline OLD")
    if args.baseline:
        threshold = parse_threshold("5%" if args.threshold is None else args.threshold)
        if args.compare or args.expect_order:
            raise ValueError("--baseline does not combine with --compare or --expect-order")
        if args.table == "plans":
            raise ValueError("--baseline compares collectives and steps (--table plans is a ranking)")
        for p in args.baseline:
            if not os.path.exists(p):
                raise ValueError(f"--baseline {p}: no such file or folder")
    for w in args.where:
        parse_filter(w)
    return threshold


def load(args):
    """(collective rows, step rows with the sweep's failed points, unreadable paths)."""
    rows, bad = reader.load_collectives(args.paths, with_samples=bool(args.baseline))
    runs, bad_steps = reader.load_steps(args.paths, quiet=True)  # the same files: reported once
    steps = plans.plan_rows(runs)
    failed, bad_points = plans.failed_points(args.paths, steps)
    for p in bad_points:
        print(f"report: cannot read the sweep point record {p}", file=sys.stderr)
    steps += failed
    return rows, steps, sorted(set(bad) | set(bad_steps) | set(bad_points))


def tables_text(args, rows, steps):
    """(collective rows shown, step rows shown, text) after the filters and --table; raises
    ValueError on bad usage."""
    if args.expect_order or args.table == "collectives":
        steps = []
    if args.table in ("steps", "plans", "predicted"):
        rows = []
    rows = apply_filters(rows, args.where)
    steps = apply_filters(steps, args.where)
    viol = order_violations(rows, args.expect_order) if args.expect_order else []
    rows, text = collective_text(args, rows, viol)
    steps, step_out = step_text(args, steps) if steps else ([], "")
    if steps and args.format == "md":
        text += ("\n## step_bench runs\n\n" if rows else "") + step_out
    elif steps and not rows:
        text = step_out
    elif steps:
        print(f"report: {len(steps)} step_bench run(s) left out of the {args.format} output "
              "(--table steps prints them)", file=sys.stderr)
    return rows, steps, text


def run(args):
    """scripts/report after its flags are parsed; returns the exit code (HELP)."""
    try:
        threshold = check_options(args)
    except ValueError as e:
        print(f"report: {e}", file=sys.stderr)
        return 2
    try:
        rows, steps, bad = load(args)
    except reader.FormatError as e:
        print(f"report: {e}", file=sys.stderr)
        return 2
    if args.baseline:
        rows, steps = apply_filters(rows, args.where), apply_filters([r for r in steps if r.get("run_id") and
                                                                      "tokens_per_s" in r], args.where)
        try:
            code, _ = regression(args, threshold, rows, steps)
        except reader.FormatError as e:
            print(f"report: {e}", file=sys.stderr)
            return 2
        return 1 if bad else code
    try:
        rows, steps, text = tables_text(args, rows, steps)
    except ValueError as e:
        print(f"report: {e}", file=sys.stderr)
        return 2
    if not rows and not steps:
        what = "rows to compare" if args.compare else "rows"
        print(f"report: no {what} in {len(args.paths)} path(s){' after filters' if args.where else ''}",
              file=sys.stderr)
        return 1
    if args.output:
        with open(args.output, "w") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    return 1 if bad else 0
