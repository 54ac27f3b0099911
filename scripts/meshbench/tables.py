"""meshbench.tables: filters, sorting and size formatting over the reader's plain tables.

No HDF5 and no I/O: functions of lists of dicts, shared by scripts/report and scripts/plot
so that `--where` means the same in both. Not a data-frame library.
"""
import re

from . import plans, reader

SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
# Columns whose filter values are sizes ('64K'); other numeric columns take plain numbers.
SIZE_COLUMNS = {"bytes", "count", "total_bytes", "send_bytes_per_rank", "recv_bytes_per_rank"}
FIELDS = reader.COLLECTIVE_FIELDS + [c for c in reader.STEP_FIELDS + plans.PLAN_FIELDS
                                     if c not in reader.COLLECTIVE_FIELDS]
NUMERIC = reader.COLLECTIVE_NUMERIC | reader.STEP_NUMERIC | plans.PLAN_NUMERIC
# Per-file step columns: bytes per (dim, kind), memory (rank 0's; the worst rank's), the time
# split (step/time_split, mean over ranks) and spans.
STEP_PREFIXES = ("bytes.", "mem.", "mem_analytic.", "mem_worst.", "mem_worst_analytic.", "time.", "span.")


def parse_size(text):
    """'64K' -> 65536 (binary units, like the binaries' -b/-e)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", str(text), re.I)
    if not m:
        raise ValueError(f"not a size: {text!r}")
    return int(float(m.group(1)) * SIZE_UNITS[m.group(2).upper()])


def fmt_size(b):
    """65536 -> '64K'; sizes that are not whole units stay in bytes."""
    b = int(b)
    for unit, mult in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= mult and b % mult == 0:
            return f"{b // mult}{unit}"
    return str(b)


def known_column(col):
    """A fixed column of either table, or a step table's per-file column (STEP_PREFIXES)."""
    return col in FIELDS or col.startswith(STEP_PREFIXES)


def is_numeric(col):
    return col in NUMERIC or (col.startswith(STEP_PREFIXES) and not col.startswith("span."))


_OPS = [(">=", lambda a, b: a >= b), ("<=", lambda a, b: a <= b), ("!=", lambda a, b: a != b),
        ("=", lambda a, b: a == b), (">", lambda a, b: a > b), ("<", lambda a, b: a < b)]


def parse_filter(text):
    """'col=val', 'col!=val', 'bytes>=1M', 'tag=shm,tcp' (any of) -> predicate on a row.
    A row without the column fails '=' and the comparisons and passes '!='. Raises ValueError
    on an unknown column or a malformed filter."""
    for op, fn in _OPS:
        if op in text:
            col, val = text.split(op, 1)
            col = col.strip()
            if not known_column(col):
                raise ValueError(f"unknown column '{col}' in '{text}' (columns: {', '.join(FIELDS)})")
            vals = [v.strip() for v in val.split(",")] if op in ("=", "!=") else [val.strip()]

            def conv(v, col=col):
                if is_numeric(col):
                    return parse_size(v) if col in SIZE_COLUMNS or col.startswith("bytes.") else float(v)
                return v
            cvals = [conv(v) for v in vals]
            if op == "=":
                return lambda r: any(r.get(col) == v for v in cvals)
            if op == "!=":
                return lambda r: all(r.get(col) != v for v in cvals)
            return lambda r: r.get(col) is not None and fn(r.get(col), cvals[0])
    raise ValueError(f"filter '{text}' is not COLUMN=VALUE (or !=, >=, <=, >, <)")


def apply_filters(rows, filters):
    preds = [parse_filter(f) for f in filters]
    return [r for r in rows if all(p(r) for p in preds)]


def sort_rows(rows):
    """Collective rows in a stable reading order (collective, binary, tag, ..., size)."""
    key = ["collective", "binary", "tag", "backend", "mem", "ranks", "nodes", "group", "dtype",
           "redop", "placement", "bytes", "run_id"]
    return sorted(rows, key=lambda r: tuple(str(r.get(k, "")).zfill(20) if k in NUMERIC else str(r.get(k, ""))
                                            for k in key))


def distinguishing(rows, cols):
    """The columns of cols (in order) needed to tell rows apart: a column is kept only if some
    two rows agree on every column kept so far yet differ in it (redop next to collective, or
    nodes next to a fabric tag that implies it, are left out)."""
    kept = []
    for c in cols:
        seen = {}
        for r in rows:
            k = tuple(r.get(x) for x in kept)
            if seen.setdefault(k, r.get(c)) != r.get(c):
                kept.append(c)
                break
    return kept
