"""meshbench.report_plans: scripts/report's plan table and step --compare. Runs that differ in
plan, or several runs of one plan (its rounds), become one row per plan and tag, best median
tokens/s first: global batch, tokens/s and step time as the median of the rounds with their
spread, whether a plan is separable from the next, exposed communication per dimension and the
bubble from step/time_split, the worst stage's bubble, peak memory over ranks, the straggler,
the dimensions whose groups cross nodes and the check (meshbench.plans groups the rounds).
--compare on step runs pairs the same plans under two selections (tag=shm tag=tcp).
"""
import math

from . import plans, spread
from .report_collectives import join_sides, side_names
from .report_format import human_bytes, md_table, to_csv, to_json
from .report_steps import no_split_note, oversubscribed_note, run_place_ms, run_tokens_cell, step_human, unfinished_note


def with_rank(text, rank):
    return text if rank is None or text in ("", "-") else f"{text} (rank {rank})"


def step_place_ms(g, v=None):
    """The decimal place (in ms) of a plan's step time: 2 significant digits of its spread. With
    `v` (seconds), the place of that part of the step (an exposed time, the bubble): the step's,
    but never coarser than v's own first digit, so that 4.3 ms of exposed time beside a step
    whose rounds spread by 100 ms prints 4, not 0."""
    m = g.get("step")
    if m is None:
        return None
    p = spread.place(m.width * 1e3, m.med * 1e3)
    if v is None or not v or math.isnan(v):
        return p
    return min(p, math.floor(math.log10(abs(v) * 1e3)))


def plan_columns(groups):
    """[(header, cell(group), right-aligned)] of the plan table: the rank, what differs between
    the plans, the global batch, tokens/s and step time with their spread, the rounds, whether a
    plan is separable from the next, MFU, the time split's exposed communication per dimension
    and bubble, memory, topology, check."""
    cols = [("#", lambda g: str(g["position"]), True), ("plan", lambda g: g.get("plan", ""), False),
            ("ranks", lambda g: str(g.get("ranks", "")), True)]
    for c in ("tag", "model"):
        if len({g.get(c) for g in groups if g.get(c)}) > 1:
            cols.append((c, lambda g, c=c: str(g.get(c) or ""), False))
    cols.append(("global batch", lambda g: "" if g.get("global_batch") is None else str(g["global_batch"]), True))
    cols.append(("tokens/s", lambda g: spread.fmt_measure(g["tokens"]) if g["tokens"] else "", True))
    cols.append(("step (ms)", lambda g: spread.fmt_measure(g["step"], 1e3) if g["step"] else "", True))
    cols.append(("spread", lambda g: g["step"].rule if g["step"] else "", False))
    cols.append(("vs next", lambda g: {True: "separable", False: "not separable"}.get(g["separable"], ""), False))
    cols.append(("MFU", lambda g: (spread.fmt(100 * g["mfu"].med, spread.place(100 * g["mfu"].width, 100 * g["mfu"].med))
                                   + "%") if g.get("mfu") else "", True))

    def ms(g, col):
        v = g.get(col)
        if g["step"] is None or "time.step" not in g:
            return ""
        return spread.fmt(1e3 * (v or 0.0), step_place_ms(g, v or 0.0)) if v is not None else "-"
    for d in plans.exposed_dims(groups):
        cols.append((f"exposed {d} (ms)", lambda g, d=d: ms(g, f"time.exposed.{d}"), True))
    if any(g.get("time.bubble") for g in groups):
        cols.append(("bubble (ms)", lambda g: ms(g, "time.bubble") if g.get("pp", 1) and g.get("pp", 1) > 1 else "",
                     True))
    cols += [("bubble (worst stage)", lambda g: with_rank(step_human("bubble", g.get("bubble_worst")) or "-",
                                                          g.get("bubble_worst_rank")), True),
             ("peak memory/rank", lambda g: with_rank(human_bytes(g["mem_peak"]) if g.get("mem_peak") is not None
                                                      else "", g.get("mem_peak_rank")), True),
             ("straggler", lambda g: g.get("straggler", ""), True),
             ("groups across nodes", lambda g: g.get("cross_nodes") or "", False),
             ("check", lambda g: str(g.get("check") or ""), False)]
    if any(g.get("status") != "ok" for g in groups):
        cols.append(("status", lambda g: str(g.get("status", "")), False))
    return cols


def plan_groups_json(groups):
    """One flat row per plan (--table plans, CSV/JSON)."""
    out = []
    for g in groups:
        r = {"position": g["position"]}
        for k in plans.ROUND_KEY + ["tokens_per_step", "rounds"]:
            r[k] = g.get(k)
        r["run_ids"] = " ".join(str(x) for x in g["run_ids"])
        for name, m in (("tokens_per_s", g["tokens"]), ("step_time", g["step"]), ("mfu_measured_peak", g["mfu"])):
            r.update({name: m.med if m else None, f"{name}_lo": m.lo if m else None, f"{name}_hi": m.hi if m else None})
        r["spread"] = g["step"].rule if g["step"] else ""
        r["separable_next"] = g["separable"]
        for k in sorted(k for k in g if k.startswith("time.")):
            r[k] = g[k]
        for k in ("bubble_worst", "bubble_worst_rank", "mem_peak", "mem_peak_rank", "straggler", "cross_nodes",
                  "check", "status", "order", "schedule", "vpp", "zero_stage", "microbatches", "dp", "tp", "cp",
                  "pp", "ep"):
            r[k] = g.get(k)
        out.append(r)
    return out


def rank_groups(steps):
    groups = plans.plan_groups(steps)
    for i, g in enumerate(groups):
        g["position"] = i + 1
    return groups


def plan_markdown(steps):
    groups = rank_groups(steps)
    text = ("Plans, best median tokens/s first (a plan's rounds: its runs with the same plan, global batch and "
            "tag; in parentheses the spread named in 'spread'):\n\n" + md_table(plan_columns(groups), groups))
    notes = []
    gbs = sorted({g.get("global_batch") for g in groups if g.get("global_batch") is not None})
    if len(gbs) > 1:
        notes.append(f"global batches differ ({', '.join(str(b) for b in gbs)} samples): the plans are ranked by "
                     "tokens/s; their step times are not comparable with each other")
    pairs = [(g, groups[i + 1]) for i, g in enumerate(groups) if g["separable"] is False]
    for a, b in pairs:
        notes.append(f"#{a['position']} {a.get('plan')} and #{b['position']} {b.get('plan')}: their tokens/s "
                     "intervals overlap: not separable (more rounds, or a quieter machine, may tell them apart)")
    notes += [unfinished_note(r) for r in steps if r.get("status") != "ok"]
    notes += [f"run {r['run_id']}: measured bytes differ from the plan's (bytes_match 0)"
              for r in steps if r.get("bytes_match") == 0]
    notes += no_split_note(steps)
    notes += oversubscribed_note(steps)
    notes.append("plan: degrees above 1 in rank order (fastest-varying first), then schedule, vpp, zero, m; "
                 "global batch: samples per step (tokens/s counts global batch x seq tokens); tokens/s and step: "
                 "the median over rounds of each run's own median (step: each step's slowest rank), in parentheses "
                 "the min-max over rounds, or with one round its steps' min-max (95% CI of the median from 6 steps "
                 "on); numbers to 2 significant digits of their spread; vs next: separable when the tokens/s "
                 "intervals of this plan and the next do not overlap; exposed and bubble (ms): step/time_split per "
                 "rank and step, mean over ranks, median over rounds (docs/metrics.md); bubble (worst stage): the largest "
                 "share of a rank's step blocked on a stage that had not posted; peak memory: the largest engine "
                 "peak over ranks; groups across nodes: from topology/groups (docs/report.md, \"Reading the report\")")
    return text + "\n" + "\n".join("- " + n for n in notes) + "\n"


def step_compare(args, steps):
    """The same plans under A and B (e.g. tag=shm tag=tcp): joined rows and Markdown."""
    pairs, keycols, unmatched, dups, differ = join_sides(steps, *args.compare, plans.PLAN_KEY)
    dims = plans.exposed_dims([x for _, a, b in pairs for x in (a, b)])
    out = []
    for k, a, b in pairs:
        j = dict(zip(keycols, k))
        ta, tb = a.get("step_time_median"), b.get("step_time_median")
        j.update(step_time_a=ta, step_time_b=tb, tokens_per_s_a=a.get("tokens_per_s"),
                 tokens_per_s_b=b.get("tokens_per_s"),
                 ratio_t=tb / ta if isinstance(ta, float) and isinstance(tb, float) and ta > 0 else None,
                 cross_nodes_a=a.get("cross_nodes"), cross_nodes_b=b.get("cross_nodes"),
                 check_a=a.get("check"), check_b=b.get("check"), _place_a=run_place_ms(a), _place_b=run_place_ms(b),
                 _tokens_a=run_tokens_cell(a), _tokens_b=run_tokens_cell(b))
        for d in dims:
            j[f"exposed_a.{d}"] = a.get(f"time.exposed.{d}")
            j[f"exposed_b.{d}"] = b.get(f"time.exposed.{d}")
        out.append(j)
    out = plans.sort_by_throughput([dict(r, tokens_per_s=r["tokens_per_s_a"]) for r in out])
    for r in out:
        del r["tokens_per_s"]
    if args.format != "md" or not out:
        cols = args.columns.split(",") if args.columns else [k for k in out[0] if not k.startswith("_")] if out else []
        return out, (to_csv(out, cols) if args.format == "csv" else to_json(out, cols)) if out else ""
    na, nb = side_names(args)

    def ms(v, p):  # ms to the precision of that side's spread over its steps
        return "-" if v is None else spread.fmt(v * 1e3, p)
    cols = [("plan", lambda r: r.get("plan", ""), False)]
    cols += [(c, lambda r, c=c: str(r.get(c, "")), c != "model") for c in ("ranks", "model")
             if c in keycols and len({r.get(c) for r in out}) > 1]
    cols += [(f"step {na} (ms)", lambda r: ms(r["step_time_a"], r["_place_a"]), True),
             (f"step {nb} (ms)", lambda r: ms(r["step_time_b"], r["_place_b"]), True),
             (f"time {nb}/{na}", lambda r: "-" if r["ratio_t"] is None else f"{r['ratio_t']:.3g}", True),
             (f"tokens/s {na}", lambda r: r["_tokens_a"], True),
             (f"tokens/s {nb}", lambda r: r["_tokens_b"], True)]
    sides = (("a", na), ("b", nb))
    for d in dims:
        cols += [(f"exposed {d} {n} (ms)", lambda r, k=f"exposed_{s}.{d}", s=s: ms(r.get(k), r[f"_place_{s}"]), True)
                 for s, n in sides]
    if any(r["cross_nodes_a"] != r["cross_nodes_b"] for r in out):
        cols += [(f"across nodes {n}", lambda r, k=f"cross_nodes_{s}": str(r[k]), False) for s, n in sides]
    text = f"Plans under {args.compare[0]} (A) and {args.compare[1]} (B), best tokens/s under A first:\n\n"
    text += md_table(cols, out)
    if differ:
        text += f"\n(the two sides also differ in {'; '.join(differ)})\n"
    if unmatched or dups:
        text += f"\n({unmatched} runs without a partner, {dups} duplicates: latest run kept)\n"
    text += ("\n- exposed: step/time_split per rank and step, mean over ranks (docs/metrics.md); one run per "
             "plan and side (for rounds and a verdict by exit code use --baseline)\n")
    return out, text
