"""meshbench.predict_ranking: predict-then-run step sweeps (scripts/sweep --steps --predict
CAL.h5 --top N [--spread K]; docs/sweeps.md "Predict, then run").

step_bench --plan-only --predict CAL.h5 gives every valid plan a `predicted` object (the step
model's step time, tokens/s, exposed communication, bubble; parallel/predict). This module
ranks the plans by predicted tokens/s, chooses the ones to run (the N best, then K spread
evenly over the rest of the ranking, the worst included, so that the run checks the ordering
and not only the top), and after the runs compares the predicted order with the measured one:
Spearman's rank correlation (ties get the mean of their ranks) between predicted and measured
tokens/s, measured as the report's plan table measures it (the median over a plan's rounds:
meshbench.plans.plan_groups).

Pure functions (rank, choose, ranks, spearman) plus the printing; no HDF5 of its own (the
measured side goes through reader and plans).
"""
import json
import math
import os

import numpy as np

from . import plans, reader


def predicted_tokens(c):
    """A candidate's predicted tokens/s (its plan-only JSON's predicted.tokens_per_s)."""
    p = (c.get("plan") or {}).get("predicted") or {}
    v = p.get("tokens_per_s")
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def rank(valid):
    """The valid candidates, best predicted tokens/s first (ties: by plan id), each with
    'pred_rank' (1-based)."""
    out = sorted(valid, key=lambda c: (-(predicted_tokens(c) or 0.0), c["id"]))
    for i, c in enumerate(out, 1):
        c["pred_rank"] = i
    return out


def choose(total, top, spread):
    """{index into the ranking: 'top' or 'spread'}: the first `top` (None: all), then `spread`
    more spread evenly over the rest: the last of each of `spread` equal parts of it (the worst
    plan included): rest R, k picks -> indices top + round(j R / k) - 1, j = 1..k."""
    top = total if top is None else min(top, total)
    picked = {i: "top" for i in range(top)}
    rest = total - top
    k = min(spread, rest)
    for j in range(1, k + 1):
        picked[top + int(math.floor(j * rest / k + 0.5)) - 1] = "spread"
    return picked


def select(valid, top, spread):
    """(the ranking with 'selected' set on each: 'top', 'spread' or ''; the chosen candidates in
    ranking order)."""
    ranked = rank(valid)
    picked = choose(len(ranked), top, spread)
    for i, c in enumerate(ranked):
        c["selected"] = picked.get(i, "")
    return ranked, [c for c in ranked if c["selected"]]


def ranks(values):
    """1-based ranks, ties given the mean of the ranks they span (numpy)."""
    v = np.asarray(values, dtype=float)
    order = np.argsort(v, kind="mergesort")
    r = np.empty(len(v))
    r[order] = np.arange(1, len(v) + 1)
    for x in np.unique(v):
        tie = v == x
        if tie.sum() > 1:
            r[tie] = r[tie].mean()
    return r


def spearman(x, y):
    """Spearman's rank correlation of two equal-length sequences: the Pearson correlation of
    their ranks (ties averaged). NaN for fewer than 2 pairs or when either side is constant."""
    if len(x) != len(y):
        raise ValueError("spearman: sequences of different lengths")
    if len(x) < 2:
        return math.nan
    rx, ry = ranks(x), ranks(y)
    dx, dy = rx - rx.mean(), ry - ry.mean()
    den = math.sqrt(float((dx * dx).sum() * (dy * dy).sum()))
    return math.nan if den == 0 else float((dx * dy).sum() / den)


# --- printing ----------------------------------------------------------------------------------
def _tok(v):
    return "-" if v is None else (f"{v:,.0f}" if v >= 1000 else f"{v:.3g}")


def ranking_text(batch):
    """One world size's ranking: every valid plan by predicted tokens/s, what runs and why."""
    rk = batch.get("ranking")
    if not rk:
        return ""
    n_top = sum(1 for r in rk if r["selected"] == "top")
    n_spread = sum(1 for r in rk if r["selected"] == "spread")
    # on a cluster (predictions with GPU memory): why each plan ranks where it does
    why = any((r.get("predicted") or {}).get("memory_per_stage") for r in rk)
    out = [f"ranks={batch['ranks']}: {len(rk)} valid plans ranked by predicted tokens/s "
           f"(calibration {batch.get('predict')}); running the {n_top} best"
           + (f" and {n_spread} spread over the rest" if n_spread else ""),
           "| pred # | plan | predicted tokens/s | predicted step (ms) | extrapolated | runs |"
           + (" MFU | bubble | exposed per dimension (ms) | memory headroom |" if why else ""),
           "|---:|---|---:|---:|---|---|" + ("---:|---:|---|---:|" if why else "")]
    for r in rk:
        p = r.get("predicted") or {}
        st = p.get("step_time_s")
        line = (f"| {r['pred_rank']} | {r['id']} | {_tok(r.get('tokens'))} | "
                f"{'-' if not isinstance(st, (int, float)) else f'{st * 1e3:.4g}'} | "
                f"{'yes' if p.get('extrapolated') else 'no'} | {r['selected'] or '-'} |")
        if why:
            ex = ", ".join(f"{d} {v * 1e3:.0f}" for d, v in sorted((p.get("exposed_s") or {}).items(), key=lambda x: -x[1])
                           if v > 0)
            stages = p.get("memory_per_stage") or []
            hbm = p.get("hbm_bytes")
            head = (f"{100 * (1 - max(m['total'] for m in stages) / hbm):.0f}%" if stages and hbm else "-")
            line += (f" {100 * (p.get('mfu') or 0):.1f}% | {100 * (p.get('bubble') or 0):.1f}% | {ex or '-'} | "
                     f"{head} |")
        out.append(line)
    return "\n".join(out) + "\n"


def print_rankings(batches):
    for b in batches:
        t = ranking_text(b)
        if t:
            print(t)


# --- after the runs ------------------------------------------------------------------------------
def measured_tokens(files):
    """The plan table's tokens/s of one point's round files (the median over its rounds), or
    None when no round left numbers."""
    files = [f for f in files if os.path.exists(f)]
    if not files:
        return None
    runs, _ = reader.load_steps(files, quiet=True)
    groups = plans.plan_groups(plans.plan_rows(runs))
    meds = [g["tokens"].med for g in groups if g.get("tokens") is not None]
    return meds[0] if len(meds) == 1 else None


def comparison(points, result_files):
    """Per (world size, backend, fabric): the run points' rows {id, plan, pred_rank, predicted,
    measured} and Spearman's rho over those with both. result_files(point) -> its round files."""
    by = {}
    for pt in points:
        if pt.get("pred_rank") is None:
            continue
        by.setdefault((pt["ranks"], pt["backend"], pt["fabric"]), []).append(pt)
    out = []
    for key, pts in sorted(by.items()):
        rows = [{"id": p["id"], "pred_rank": p["pred_rank"], "selected": p.get("selected", ""),
                 "predicted": predicted_tokens(p), "measured": measured_tokens(result_files(p))}
                for p in sorted(pts, key=lambda p: p["pred_rank"])]
        both = [r for r in rows if r["predicted"] is not None and r["measured"] is not None]
        rho = spearman([r["predicted"] for r in both], [r["measured"] for r in both])
        if both:
            mr = ranks([-r["measured"] for r in both])
            for r, m in zip(both, mr):
                r["measured_rank"] = float(m)
        out.append({"ranks": key[0], "backend": key[1], "fabric": key[2], "rows": rows, "spearman": rho,
                    "pairs": len(both)})
    return out


def comparison_text(comp):
    text = ""
    for c in comp:
        text += (f"\nPredicted against measured tokens/s, ranks={c['ranks']} {c['backend']} {c['fabric']} "
                 "(measured: the median over each plan's rounds):\n\n"
                 "| pred # | measured # | point | run as | predicted tokens/s | measured tokens/s | error |\n"
                 "|---:|---:|---|---|---:|---:|---:|\n")
        for r in c["rows"]:
            err = "-" if r["predicted"] is None or not r["measured"] else \
                f"{100 * (r['predicted'] / r['measured'] - 1):+.1f}%"
            mr = r.get("measured_rank")
            text += (f"| {r['pred_rank']} | {'-' if mr is None else f'{mr:g}'} | {r['id']} | {r['selected']} | "
                     f"{_tok(r['predicted'])} | {_tok(r['measured'])} | {err} |\n")
        rho = c["spearman"]
        text += (f"\nSpearman rank correlation between predicted and measured tokens/s over {c['pairs']} plans: "
                 + ("- (fewer than 2 plans with both, or one side constant)" if math.isnan(rho) else f"{rho:.3f}")
                 + "\n")
    return text


def write_rankings(out_dir, batches):
    """<out>/ranking.json: per world size every valid plan by predicted tokens/s, with its
    prediction and whether it runs (top, spread)."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "ranking.json"), "w") as fh:
        json.dump([{"ranks": b["ranks"], "predict": b.get("predict"), "ranking": b["ranking"]}
                   for b in batches if b.get("ranking")], fh, indent=1)


def write_comparison(out_dir, comp):
    """<out>/prediction.json: the comparison (rows and rho per world size and fabric)."""
    with open(os.path.join(out_dir, "prediction.json"), "w") as fh:
        json.dump([{**c, "spearman": None if math.isnan(c["spearman"]) else c["spearman"]} for c in comp], fh,
                  indent=1)
