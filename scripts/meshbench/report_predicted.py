"""meshbench.report_predicted: scripts/report's predicted against measured table, for step runs
made with step_bench --predict CAL.h5 (step/predicted beside the measurement; docs/report.md
"Predicted against measured").

One block of rows per plan and tag (the plan table's groups: meshbench.plans.plan_groups, in
its order), one row per quantity: step time, tokens/s, the bubble (pipeline plans) and the
exposed communication per dimension, each predicted, measured and the signed error
predicted / measured - 1. Every measured number is the plan table's own (no second
definition): the step time and tokens/s are the median over the plan's rounds of each run's
median, exposed the median over rounds of the time split's mean over ranks, the bubble the median over
rounds of each run's mean over ranks (step/summary bubble_measured). The predicted numbers are
as step_bench stored them (pred.* columns of meshbench.plans), the median over the rounds
that hold one (they are the same calibration's: normally equal). An extrapolated prediction
(a size or shape beyond the calibration's measured range) is marked * with what was. The
exposed rows also keep each round's measured and predicted value (measured_rounds,
predicted_rounds; measured_min and measured_max), so that a reader, and scripts/predict-check's
verdicts, can see how far the rounds themselves spread around the median compared.
"""
import math

from . import plans, spread
from .report_format import md_table, to_csv, to_json
from .report_plans import rank_groups, step_place_ms


def has_predictions(steps):
    return any("pred.step_time" in r for r in steps)


def _pred(rows, col):
    vals = [r[col] for r in rows if isinstance(r.get(col), (int, float)) and not math.isnan(r[col])]
    return spread.median(vals) if vals else None


def _error(pred, meas):
    if pred is None or meas is None or not isinstance(meas, (int, float)) or math.isnan(meas) or meas == 0:
        return None
    return pred / meas - 1


def group_rows(g):
    """The predicted-against-measured rows of one plan group (its runs with a prediction):
    dicts position, plan, tag, ranks, quantity, unit, predicted, measured, error, extrapolated,
    extrapolated_what, calibration, fabric, runs (rounds with a prediction)."""
    rows = [r for r in g["rows"] if "pred.step_time" in r]
    if not rows:
        return []
    extra = any(r.get("pred.extrapolated") for r in rows)
    what = sorted({r.get("pred.extrapolated_what") or "" for r in rows if r.get("pred.extrapolated")} - {""})
    base = {"position": g["position"], "plan": g.get("plan"), "tag": g.get("tag"), "ranks": g.get("ranks"),
            "extrapolated": int(extra), "extrapolated_what": "; ".join(what),
            "calibration": ",".join(sorted({str(r.get("pred.calibration", "")) for r in rows})),
            "fabric": ",".join(sorted({str(r.get("pred.fabric", "")) for r in rows})), "runs": len(rows)}
    out = []

    def add(quantity, unit, pred, meas, **extra):
        out.append(dict(base, quantity=quantity, unit=unit, predicted=pred, measured=meas, error=_error(pred, meas),
                        **extra))
    add("step time", "s", _pred(rows, "pred.step_time"), g["step"].med if g.get("step") else None)
    add("tokens/s", "tokens/s", _pred(rows, "pred.tokens_per_s"), g["tokens"].med if g.get("tokens") else None)
    if (g.get("pp") or 1) > 1:
        add("bubble", "share of the step", _pred(rows, "pred.bubble"), g.get("bubble_mean"))
    dims = {k.split(".", 2)[2] for r in rows for k in r if k.startswith("pred.exposed.")}
    dims |= {k.split(".", 2)[2] for k in g if k.startswith("time.exposed.")}
    rank = {d: i for i, d in enumerate(plans.order_dims(""))}
    # the runs the measured exposed median is over (plans.plan_groups: those with numbers and the
    # time split), for each round's own value: the spread the median hides
    split = [r for r in g["rows"] if plans.has_numbers(r) and "time.step" in r]
    for d in sorted(dims, key=lambda d: (rank.get(d, len(rank)), d)):
        pred, meas = _pred(rows, f"pred.exposed.{d}"), g.get(f"time.exposed.{d}")
        if not pred and not meas:
            continue  # neither side has any: nothing to compare
        mr = [r.get(f"time.exposed.{d}", 0.0) for r in split]  # a round that never blocked on d: 0
        add(f"exposed {d}", "s", pred, meas, measured_rounds=mr, measured_min=min(mr) if mr else None,
            measured_max=max(mr) if mr else None,
            predicted_rounds=[r[f"pred.exposed.{d}"] for r in rows
                              if isinstance(r.get(f"pred.exposed.{d}"), (int, float))])
    return out


def predicted_rows(steps):
    """Every plan group's rows (group_rows), in the plan table's order."""
    out = []
    for g in rank_groups(steps):
        out += group_rows(g)
    return out


def _cell(r, v, places):
    """A value to the plan table's precision of its quantity: ms to the step time's place,
    tokens/s to the tokens' (2 significant digits of the measured spread; 3 of the value
    without one), a share in % to 0.1."""
    if v is None:
        return "-"
    if r["unit"] == "s":
        return spread.fmt(v * 1e3, places[0])
    if r["unit"] == "share of the step":
        return f"{100 * v:.1f}%"
    return spread.fmt(v, places[1] if places[1] is not None else spread.place(None, v))


def predicted_markdown(steps):
    """The table and its notes (Markdown)."""
    groups = [g for g in rank_groups(steps) if any("pred.step_time" in r for r in g["rows"])]
    rows = []
    for g in groups:
        p = step_place_ms(g)
        tok = g.get("tokens")
        p = (-3 if p is None else p, spread.place(tok.width, tok.med) if tok else None)
        for r in group_rows(g):
            p_row = p
            if r["unit"] == "s" and r["quantity"] != "step time" and step_place_ms(g) is not None:
                # a part of the step: the step's place, never coarser than the measured value's own
                # first digit (the plan table's exposed columns: report_plans.step_place_ms)
                p_row = (step_place_ms(g, r["measured"] or 0.0), p[1])
            star = " *" if r["extrapolated"] else ""
            q = r["quantity"] + (" (ms)" if r["unit"] == "s" else "")
            meas = _cell(r, r["measured"], p_row)
            if len(r.get("measured_rounds") or []) >= 2 and r["measured_max"] > r["measured_min"]:
                # the rounds' min-max beside their mean
                meas += f" ({_cell(r, r['measured_min'], p_row)}-{_cell(r, r['measured_max'], p_row)})"
            rows.append(dict(r, _q=q, _pred=_cell(r, r["predicted"], p_row) + (star if r["predicted"] is not None else ""),
                             _meas=meas))
    first = set()
    for r in rows:
        r["_first"] = r["position"] not in first
        first.add(r["position"])
    cols = [("#", lambda r: str(r["position"]) if r["_first"] else " ", True),
            ("plan", lambda r: str(r["plan"] or "") if r["_first"] else " ", False)]
    if len({r["tag"] for r in rows}) > 1:
        cols.append(("tag", lambda r: str(r["tag"] or "") if r["_first"] else " ", False))
    cols += [("quantity", lambda r: r["_q"], False), ("predicted", lambda r: r["_pred"], True),
             ("measured", lambda r: r["_meas"], True),
             ("error", lambda r: "-" if r["error"] is None else f"{100 * r['error']:+.1f}%", True)]
    text = ("Predicted against measured (runs made with --predict; error = predicted / measured - 1):\n\n"
            + md_table(cols, rows))
    notes = []
    for g in groups:
        rs = [r for r in g["rows"] if "pred.step_time" in r]
        if any(r.get("pred.extrapolated") for r in rs):
            what = "; ".join(sorted({r.get("pred.extrapolated_what") or "" for r in rs} - {""}))
            notes.append(f"#{g['position']} {g.get('plan')}: * extrapolated (beyond the calibration's measured "
                         f"sizes or shapes){': ' + what if what else ''}")
        if len(rs) < len(g["rows"]):
            notes.append(f"#{g['position']} {g.get('plan')}: {len(rs)} of its {len(g['rows'])} runs hold a "
                         "prediction; measured is the plan's, over all its rounds")
    cals = sorted({str(r.get("pred.calibration", "")) for g in groups for r in g["rows"] if "pred.step_time" in r})
    notes.append("predicted: step/predicted as step_bench --predict stored it (calibration "
                 f"{', '.join(c or '?' for c in cals)}; exposed: per step, the mean over ranks); measured: "
                 "the plan table's numbers: step time and tokens/s the median over rounds, exposed the median over "
                 "rounds of the time split's mean over ranks (in brackets the rounds' min-max), bubble the median over rounds of "
                 "the mean over ranks of each rank's bubble share (step/summary bubble_measured) (docs/report.md, "
                 "\"Predicted against measured\")")
    return text + "\n" + "\n".join("- " + n for n in notes) + "\n"


PREDICTED_COLUMNS = ["position", "plan", "tag", "ranks", "quantity", "unit", "predicted", "measured", "measured_min",
                     "measured_max", "error",
                     "extrapolated", "extrapolated_what", "calibration", "fabric", "runs"]


def predicted_text(steps, fmt, columns=None):
    """--table predicted: the rows as Markdown (with the notes), CSV or JSON (seconds, shares)."""
    if fmt == "md":
        return predicted_markdown(steps)
    rows = predicted_rows(steps)
    cols = columns or PREDICTED_COLUMNS
    return to_csv(rows, cols) if fmt == "csv" else to_json(rows, cols)
