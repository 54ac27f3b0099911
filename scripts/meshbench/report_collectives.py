"""meshbench.report_collectives: scripts/report's collective table: one row per (run,
collective, dtype, op, placement, group, size) as the binaries stored it, --compare (two
selections joined point by point: B/A time ratio) and --expect-order (a physically slower fabric
that reads faster is flagged). It reads the binaries' numbers; it computes only ratios.
"""
import math
import sys

from . import tables
from .report_format import FIELDS, HEADERS, MD_COLUMNS, markdown, to_csv, to_json
from .tables import distinguishing, fmt_size, parse_filter, sort_rows

# What identifies a measured point (compare joins on these, minus the compared column).
IDENTITY = ["binary", "collective", "tag", "backend", "mem", "timing", "rank_stat", "ranks", "nodes", "group",
            "mesh", "dtype", "redop", "placement", "root", "bytes"]


def parse_selector(text):
    if "=" not in text:
        raise ValueError(f"--compare takes COLUMN=VALUE, got '{text}'")
    col, val = text.split("=", 1)
    if not tables.known_column(col):
        raise ValueError(f"unknown column '{col}' in --compare {text}")
    return col, val


def join_sides(rows, sel_a, sel_b, identity):
    """Pair the rows matching selector A with those matching B on every identity column except
    the compared ones. Returns (pairs [(key, a, b)], key columns, unmatched count, duplicates,
    'col: x vs y' for columns implied by the selection). Duplicates on one side (the same
    point measured twice) keep the latest run and are counted."""
    (ca, va), (cb, vb) = parse_selector(sel_a), parse_selector(sel_b)
    pa, pb = parse_filter(f"{ca}={va}"), parse_filter(f"{cb}={vb}")
    keycols = [c for c in identity if c not in (ca, cb)]
    sel_rows = {"a": [r for r in rows if pa(r)], "b": [r for r in rows if pb(r)]}
    # A column constant on each side but different between them comes with the selection
    # (tag=shm on 1 node against tag=netns on 2): it is not part of the join.
    implied = []
    for c in keycols:
        va_, vb_ = {r.get(c) for r in sel_rows["a"]}, {r.get(c) for r in sel_rows["b"]}
        if len(va_) == 1 and len(vb_) == 1 and va_ != vb_:
            implied.append(c)
    keycols = [c for c in keycols if c not in implied]
    side = {"a": {}, "b": {}}
    dups = 0
    for name in ("a", "b"):
        for r in sel_rows[name]:
            k = tuple(r.get(c) for c in keycols)
            old = side[name].get(k)
            if old is not None:
                dups += 1
                if old.get("start_time", "") > r.get("start_time", ""):
                    continue
            side[name][k] = r
    pairs = [(k, a, side["b"][k]) for k, a in side["a"].items() if k in side["b"]]
    unmatched = len(side["a"]) + len(side["b"]) - 2 * len(pairs)
    differ = [f"{c}: {sel_rows['a'][0].get(c)} vs {sel_rows['b'][0].get(c)}" for c in implied]
    # Where the groups sit (intra-node, inter-node) is not a join column, but when the two sides
    # sit differently it is what the comparison means: say it.
    spans = [sorted({str(r.get("span") or "?") for r in sel_rows[n]}) for n in ("a", "b")]
    if spans[0] != spans[1]:
        differ.append(f"span: {va} {','.join(spans[0])}, {vb} {','.join(spans[1])}")
    return pairs, keycols, unmatched, dups, differ


def compare(rows, sel_a, sel_b):
    """Collective points of A joined with B's (join_sides). Returns (joined rows, varying key
    columns, unmatched count, duplicates, implied differences)."""
    pairs, keycols, unmatched, dups, differ = join_sides(rows, sel_a, sel_b, IDENTITY)
    out = []
    for k, a, b in pairs:
        j = dict(zip(keycols, k))
        j.update({"t_a": a["t_median"], "t_b": b["t_median"],
                  "busbw_a": a["busbw"], "busbw_b": b["busbw"],
                  "ratio_t": b["t_median"] / a["t_median"] if a["t_median"] > 0 else math.nan,
                  "ratio_busbw": a["busbw"] / b["busbw"] if b["busbw"] > 0 else math.nan,
                  "wrong": a["wrong"] + b["wrong"]})
        out.append(j)
    varying = distinguishing(out, ["collective"] + [c for c in keycols if c not in ("collective", "bytes")])
    varying = [c for c in keycols if c in varying or c in ("collective", "bytes")]
    return sort_rows(out), varying, unmatched, dups, differ


def side_names(args):
    """The two sides' names for headers: the values when both selectors name one column."""
    (ca, a), (cb, b) = parse_selector(args.compare[0]), parse_selector(args.compare[1])
    return (a, b) if ca == cb else tuple(args.compare)


def order_violations(rows, selector, margin=0.2):
    """selector 'tag=shm,tcp-lo,netns' lists values of a column from physically fastest to
    slowest. Returns (point, fast value, slow value, t_fast, t_slow) wherever the slower one's
    time is below the faster one's by more than `margin` (t_slow < t_fast / (1 + margin)) on the
    same point (every identity column but this one). Not a timing test: it reads the numbers."""
    col, _, vals = selector.partition("=")
    order = [v for v in vals.split(",") if v]
    if col not in FIELDS or len(order) < 2:
        raise ValueError(f"--expect-order takes COLUMN=FASTEST,...,SLOWEST with 2 or more values, got '{selector}'")
    keycols = [c for c in IDENTITY if c not in (col, "nodes")]
    by_key = {}
    for r in rows:
        if str(r.get(col)) in order and r.get("t_median", 0) > 0:
            by_key.setdefault(tuple(r.get(c) for c in keycols), {})[str(r.get(col))] = r
    out = []
    for k, side in by_key.items():
        for i, fast in enumerate(order):
            for slow in order[i + 1:]:
                if fast in side and slow in side:
                    tf, ts = side[fast]["t_median"], side[slow]["t_median"]
                    if ts * (1 + margin) < tf:
                        out.append((dict(zip(keycols, k)), fast, slow, tf, ts))
    out.sort(key=lambda v: (str(v[0].get("collective")), str(v[0].get("placement")), v[0].get("bytes") or 0))
    return out


def violation_lines(viol, col):
    lines = []
    for p, fast, slow, tf, ts in viol:
        lines.append(f"- suspect: {col}={slow} reads {tf / ts:.2f}x faster than {col}={fast} at {p['collective']} "
                     f"{p['placement']} {fmt_size(p['bytes'])} ({ts * 1e6:.2f} vs {tf * 1e6:.2f} us); a physically "
                     f"slower fabric should not: check warm-up (warmup_converged) and load")
    return lines


def order_notes(args, viol, rows):
    if not args.expect_order:
        return ""
    col = args.expect_order.partition("=")[0]
    if not viol:
        return f"\n- fabric order {args.expect_order}: no point where a slower one reads more than 20% faster\n"
    return (f"\n{len(viol)} point(s) break the fabric order {args.expect_order}:\n"
            + "\n".join(violation_lines(viol, col)) + "\n")


def compare_headers(a, b):
    """HEADERS with the --compare columns named after the two sides."""
    return HEADERS | {"t_a": f"time {a} (us)", "t_b": f"time {b} (us)", "ratio_t": f"time {b}/{a}",
                      "busbw_a": f"busbw {a}", "busbw_b": f"busbw {b}", "ratio_busbw": f"busbw {a}/{b}"}


def compare_lines(rows, varying, a, b):
    """One line per compared series: its ratio at the two ends (the smallest size is
    latency-bound, the largest bandwidth-bound)."""
    lines = []
    groups = {}
    for r in rows:
        groups.setdefault(tuple(r.get(c) for c in varying if c != "bytes"), []).append(r)
    for k, rs in groups.items():
        rs = sorted(rs, key=lambda r: r["bytes"])
        lines.append(f"- {' '.join(str(x) for x in k)}: time {b}/{a} = {rs[0]['ratio_t']:.3g}x at "
                     f"{fmt_size(rs[0]['bytes'])}, {rs[-1]['ratio_t']:.3g}x at {fmt_size(rs[-1]['bytes'])}")
    return "\n" + "\n".join(lines) + "\n"


def collective_notes(rows):
    """Notes under the collective table: oversubscribed runs, unfinished runs, cold points."""
    notes = []
    over = {r["run_id"] for r in rows if r.get("oversubscribed")}
    if over:
        notes.append(f"{len(over)} run(s) oversubscribed (more ranks than cores on a host): "
                     "times are scheduler-bound, not the fabric's")
    unfinished = sorted({(r["run_id"], r["status"]) for r in rows if r.get("status") != "ok"})
    for rid, st in unfinished:
        notes.append(f"run {rid} has status '{st}': its rows are the sizes it finished")
    quiet = [r for r in rows if r.get("busbw") == 0 and r.get("total_bytes") == 0]
    if quiet:
        pts = ", ".join(sorted({f"{r['collective']} {fmt_size(r['bytes'])}" for r in quiet}))
        notes.append(f"{len(quiet)} point(s) moved no bytes between ranks (total_bytes 0: the routing kept every "
                     f"token on its rank), so their bandwidth is 0 and busbw.png leaves them out: {pts}")
    cold = [r for r in rows if r.get("warmup_converged") == 0]
    if cold:
        pts = ", ".join(f"{r['collective']} {fmt_size(r['bytes'])} {r['placement']}" for r in cold[:6])
        notes.append(f"{len(cold)} point(s) whose warm-up did not converge (time per call still changing at "
                     f"the cap): {pts}{', ...' if len(cold) > 6 else ''}")
    return "\n" + "\n".join("- " + n for n in notes) + "\n" if notes else ""


def collective_text(args, rows, viol):
    """(rows shown, text): the collective table (or --compare) in args.format; rows already
    filtered; viol: order_violations of --expect-order."""
    headers = HEADERS
    if args.compare:
        rows, varying, unmatched, dups, differ = compare(rows, *args.compare)
        a, b = side_names(args)
        default = varying + ["t_a", "t_b", "ratio_t", "busbw_a", "busbw_b", "ratio_busbw", "wrong"]
        headers = compare_headers(a, b)
    else:
        rows = sort_rows(rows)
        default = MD_COLUMNS if args.format == "md" else FIELDS
    cols = args.columns.split(",") if args.columns else default
    if not rows:
        return rows, ""
    if args.format != "md":
        if args.expect_order:  # keep the machine-readable output clean: the verdict goes to stderr
            sys.stderr.write(order_notes(args, viol, rows).lstrip("\n"))
        return rows, to_csv(rows, cols) if args.format == "csv" else to_json(rows, cols)
    if args.compare:
        text = markdown(rows, cols, headers)
    else:  # a heading and a table per collective, in the rows' order (was one table of every row)
        by = {}
        for r in rows:
            by.setdefault(r["collective"], []).append(r)
        text = "\n".join(f"## {coll}\n\n" + markdown(crows, cols, headers) for coll, crows in by.items())
    if args.compare:
        text += compare_lines(rows, varying, a, b)
        if differ:
            text += f"\n(the two sides also differ in {'; '.join(differ)})\n"
        if unmatched or dups:
            text += f"\n({unmatched} points without a partner, {dups} duplicates: latest run kept)\n"
        return rows, text + order_notes(args, viol, rows)
    return rows, text + collective_notes(rows) + order_notes(args, viol, rows)
