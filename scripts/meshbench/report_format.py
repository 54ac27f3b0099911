"""meshbench.report_format: how scripts/report writes a table: Markdown with human units
(microseconds, GB/s, 1M), CSV with full precision (seconds, bytes), JSON; the default
collective columns and their headers. A formatter never computes: it prints the values given.
"""
import csv
import io
import json
import math

from . import reader
from .tables import fmt_size

FIELDS = reader.COLLECTIVE_FIELDS
NUMERIC = reader.COLLECTIVE_NUMERIC

# Default Markdown columns (the list), with human units.
MD_COLUMNS = ["binary", "tag", "backend", "ranks", "nodes", "group", "placement", "bytes",
              "t_median", "algbw", "busbw", "t_p99", "slowest_rank", "wrong"]
HEADERS = {"bytes": "size", "t_median": "time (us)", "t_p99": "p99 (us)", "t_min": "min (us)",
           "t_mean": "mean (us)", "t_first": "first (us)", "algbw": "algbw (GB/s)",
           "busbw": "busbw (GB/s)", "slowest_rank": "slowest rank", "ranks": "ranks"}


def human(col, v):
    if v is None or v == "":
        return ""
    if col == "bytes":
        return fmt_size(v)
    if col.startswith("t_"):
        return f"{v * 1e6:.2f}"
    if col.startswith("ratio"):
        return f"{v:.3g}"
    if col.startswith("algbw") or col.startswith("busbw"):
        return f"{v:.4g}" if v < 100 else f"{v:.1f}"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


NO_OFF_RANK = "0 (no off-rank bytes)"


def cell(col, r):
    """One Markdown cell: human(col, value), and a bandwidth of 0 from a point that moved no
    bytes between ranks (total_bytes 0: all_to_allv whose routing kept every token on its rank)
    says so rather than reading as a dead link."""
    v = r.get(col)
    if col in ("algbw", "busbw") and v == 0 and r.get("total_bytes") == 0:
        return NO_OFF_RANK
    return human(col, v)


def markdown(rows, cols, headers=None):
    """A Markdown table of rows in human units; headers (default HEADERS) name the columns."""
    headers = HEADERS if headers is None else headers
    head = [headers.get(c, c) for c in cols]
    body = [[cell(c, r) for c in cols] for r in rows]
    right = [c in NUMERIC or c.split("_")[0] in ("ratio", "t", "busbw", "algbw") for c in cols]
    out = ["| " + " | ".join(head) + " |",
           "|" + "|".join("---:" if rt else "---" for rt in right) + "|"]
    out += ["| " + " | ".join(b) + " |" for b in body]
    return "\n".join(out) + "\n"


def to_csv(rows, cols):
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    for r in rows:
        w.writerow([repr(r[c]) if isinstance(r.get(c), float) else r.get(c, "") for c in cols])
    return buf.getvalue()


def to_json(rows, cols):
    return json.dumps([{c: r.get(c) for c in cols} for r in rows], indent=1) + "\n"


def md_table(cols, rows):
    """Markdown of [(header, cell(row), right-aligned)]; an empty cell reads '-'."""
    out = ["| " + " | ".join(h for h, _, _ in cols) + " |",
           "|" + "|".join("---:" if right else "---" for _, _, right in cols) + "|"]
    out += ["| " + " | ".join(cell(r) or "-" for _, cell, _ in cols) + " |" for r in rows]
    return "\n".join(out) + "\n"


def human_bytes(v):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    for unit, mult in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(v) >= mult:
            return f"{v / mult:.4g} {unit}"
    return f"{v:.0f} B"
