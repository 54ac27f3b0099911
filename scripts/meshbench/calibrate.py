"""meshbench.calibrate: scripts/calibrate's command once its flags are parsed (run): read
collective result files (meshbench.reader), fit every (collective, backend, dtype, group size,
node span, fabric tag) with meshbench.fit, print the fit table with each fit's held-out error
and, where it misses the target, why; with --compute measure this machine's compute rates
through step_bench (meshbench.compute); write the calibration file (docs/results.md,
"Calibration files") and with --plot the figures (plot_fits). read() loads a calibration file
back. Every file is read through meshbench.reader (only the writing, write(), opens HDF5 here).
HELP is the command's --help text.

Not the step predictor: step_bench --predict reads the file (parallel/predict).
"""
import datetime
import json
import math
import os
import shutil
import sys

import numpy as np

from . import compute, fit, reader, tables

FORMAT_VERSION = 2  # the one written; reader.CALIBRATION_READS lists those read back
KIND = reader.CALIBRATION_KIND
KEY = ("collective", "backend", "dtype", "group_size", "span", "tag")
# A key's rows must agree on these (a fit of isolated and pipelined times, of host and staged
# device memory, or of 2 ranks alone and 2 ranks beside another group, mixes two conditions).
SAME = ("timing", "mem", "ranks")
TIME_STAT = "t_median_max"

HELP = """scripts/calibrate: fit a latency-bandwidth model to collective results, measure this machine's
compute rates (--compute), and write a calibration file.

Reads HDF5 files (or folders, searched for *.h5) written by the collective binaries
(docs/results.md) and, per (collective, backend, dtype, group size, node span, fabric tag),
fits Hockney's t(n) = alpha + n / B over the message size n (the binaries' size S, bytes),
piecewise where the library switches protocol or algorithm. The time is t_median_max: per
iteration the slowest rank, the median over iterations (the report's default time); sizes
measured in several rows (placements, ops, runs) count once, at the median of their times.

Segments (1 to --max-segments, at least 3 sizes each) minimise the sum over the sizes of the
absolute log ratios |ln(t_fit/t)| plus 0.5 per segment; each line is the one through the data
of least sum of them (a robust least-absolute-deviations fit). Each fit is validated on held-out
sizes: refitted on every other size (both halves in turn) and judged on the sizes it did not
see; where the median held-out error exceeds --target the report says where and why (an end
of the range, a breakpoint, a segment too short, a noisy point).

Prints the fit table (key, segment, size range, alpha in us, bandwidth in GB/s (decimal, 1/beta:
bytes of S per second past the latency), residuals and held-out errors), the keys it could not
fit (fewer than 3 sizes) and notes. --out writes the calibration file (docs/results.md,
"Calibration files"); --plot DIR writes fits.png and fit-errors.png.

--compute measures the compute rates a step model needs (docs/predict.md, "Compute rates"): for
each mesh of a list (1 rank: --mesh dp=1; at --ranks ranks: tp=2, tp=2 --sp, cp=2, cp=2
--cp-algo ulysses; the MoE preset at 1 rank and ep=2, routing balanced), it asks
`step_bench --plan-only --world N ... --op-list` for one rank's op list (every plan before any
run), runs `[mpiexec -n N] step_bench --model M --steps 3 --warmup 1 --threads 1 ... --profile`
and reads the compute events of its timed steps: per GEMM shape (part, m, n, k) the median
seconds per call (/compute/gemm); per (op, phase, part) of rank 0 the seconds per FLOP
(attention) or per element of the op list (the elementwise ops) (/compute/rates). Collective
files are optional with --compute (the fits table is then empty). The profiled files and logs
stay in --compute-dir (default: CAL.compute/ beside --out).

  scripts/calibrate --out cal.h5 results/sweep-fabrics-local/
  scripts/calibrate --out cal.h5 shm.h5 tcp.h5 --plot plots
  scripts/calibrate shm.h5 --where placement=out-of-place --max-segments 1   # print only
  scripts/calibrate --compute --out cal.h5 shm.h5 tcp.h5   # fits and compute rates, one file
  scripts/calibrate --compute --compute-mesh "2:--mesh tp=2" --compute-mesh "1:--mesh dp=1" --out c.h5

Exit codes: 0 fitted or measured (and written), 1 a profiled compute run failed (its command and
log named), 2 bad input or usage: a missing or unreadable file, a file (or folder) without
collective runs, a key whose rows mix timing modes, memory or world sizes, nothing left to fit,
an existing --out without --force, a compute mesh step_bench refuses or a step_bench without
--op-list. The message names the file and the rule.
"""


class CalibrateError(Exception):
    """Bad input: one line naming the file or key and the rule (exit 2)."""


def key_text(k):
    c, b, d, g, s, tag = k
    return f"{c} {b} {d} {g} ranks {s} tag={tag or '(none)'}"


def _read_file(path):
    """(collective rows of one file, {run_id: routing}, {schema_version, git_sha}), all through
    meshbench.reader (read_collectives, read_file_attrs); CalibrateError if it is not a readable
    meshbench file."""
    try:
        rows = reader.read_collectives(path)
        fa, ra = reader.read_file_attrs(path)
        meta = {"schema_version": fa.get("schema_version", 0), "git_sha": fa.get("git_sha", "")}
        routing = {rid: a.get("routing", "") for rid, a in ra.items()}
    except OSError as e:
        raise CalibrateError(f"{path}: not a readable HDF5 file ({e})")
    except (KeyError, ValueError, TypeError, IndexError) as e:
        raise CalibrateError(f"{path}: malformed meshbench results file (docs/results.md): {e!r}")
    return rows, routing, meta


def load(paths, where=()):
    """(rows, sources, notes). rows: the reader's collective rows of every file, each with 't'
    (TIME_STAT in seconds) and 'key'. sources: [{file, runs, schema_version, git_sha}]. A file
    named on the command line must hold collective runs; a folder's files without any are
    named in notes. Raises CalibrateError (exit 2)."""
    rows, sources, notes, seen = [], [], [], set()
    for p in paths:
        if not os.path.exists(p):
            raise CalibrateError(f"{p}: no such file or folder")
        files = reader.expand_paths([p])
        if os.path.isdir(p) and not files:
            raise CalibrateError(f"{p}: a folder without *.h5 files (calibrate reads collective results files)")
        got = 0
        for path in files:
            if os.path.realpath(path) in seen:
                notes.append(f"{path}: given twice, read once")
                got += 1
                continue
            seen.add(os.path.realpath(path))
            frows, routing, meta = _read_file(path)
            if not frows:
                if not os.path.isdir(p):
                    raise CalibrateError(f"{path}: no collective runs (calibrate reads /runs/<id>/collectives/... "
                                         "written by the *_bench collective binaries)")
                notes.append(f"{path}: no collective runs, not used")
                continue
            for r in frows:
                r["routing"] = routing.get(r["run_id"], "")
            sources.append({"file": path, "runs": sorted({r["run_id"] for r in frows}), **meta})
            rows += frows
            got += len(frows)
        if os.path.isdir(p) and not got:
            raise CalibrateError(f"{p}: no collective runs in any of its {len(files)} *.h5 files")
    try:
        kept = tables.apply_filters(rows, where)
    except ValueError as e:
        raise CalibrateError(f"--where: {e}")
    if not kept:
        raise CalibrateError(f"no collective rows left after --where {' '.join(where)}")
    for r in kept:
        if r["collective"] == "all_to_allv" and r["routing"]:
            r["collective"] = f"all_to_allv:{r['routing']}"  # one fit per routing workload
        t = r.get(TIME_STAT)
        r["t"] = t if t is not None else r["t_median"]
        r["span"] = r.get("span") or ("intra" if r.get("nodes") == 1 else "unknown")
        r["key"] = tuple(r.get(c) for c in KEY)
    return kept, sources, notes


def series(rows):
    """{key: {'n': sizes, 't': times, 'rows': rows per size, 'spread': max/min - 1 of a size's times
    over its rows (NaN with one row), 'cold': warm-up not converged per size, 'excluded': [(size,
    why)]}}; CalibrateError when a key's rows disagree in a SAME column."""
    by_key = {}
    for r in rows:
        by_key.setdefault(r["key"], []).append(r)
    out = {}
    for k, krows in sorted(by_key.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        for c in SAME:
            vals = sorted({str(r.get(c)) for r in krows})
            if len(vals) > 1:
                raise CalibrateError(f"{key_text(k)}: its rows mix {c} {', '.join(vals)} (one fit, one condition: "
                                     f"select one with --where {c}=VALUE)")
        per, excluded = {}, []
        for r in krows:
            t = r["t"]
            if t is None or not math.isfinite(t) or t <= 0:
                excluded.append((r["bytes"], f"time {t} is not a positive number ({r['file']} {r['run_id']})"))
            elif r.get("wrong"):
                excluded.append((r["bytes"], f"{r['wrong']} wrong elements ({r['file']} {r['run_id']})"))
            else:
                per.setdefault(r["bytes"], []).append(r)
        sizes = sorted(per)
        out[k] = {"n": np.array(sizes, dtype=float),
                  "t": np.array([float(np.median([r["t"] for r in per[s]])) for s in sizes]),
                  "rows": [len(per[s]) for s in sizes],
                  "spread": np.array([spread([r["t"] for r in per[s]]) for s in sizes]),
                  "cold": [any(r.get("warmup_converged") == 0 for r in per[s]) for s in sizes],
                  "excluded": excluded}
    return out


def spread(times):
    """How far a size's repeated times (runs, placements) disagree: max / min - 1; NaN for one."""
    return float(max(times) / min(times) - 1.0) if len(times) > 1 else math.nan


class KeyFit:
    """One key's fit: segments, the in-sample residual and held-out error of every size."""

    def __init__(self, key, s, max_segments):
        self.key, self.n, self.t, self.cold = key, s["n"], s["t"], s["cold"]
        self.rows = s["rows"]
        self.spread = s["spread"]
        self.segs = fit.fit(self.n, self.t, max_segments)
        self.resid = np.concatenate([g.resid for g in self.segs])
        self.heldout, self.half_segments = fit.heldout(self.n, self.t, max_segments)

    def seg_heldout(self, g):
        e = self.heldout[g.i0:g.i1]
        e = e[np.isfinite(e)]
        return (float(np.median(e)) if len(e) else math.nan), len(e)

    def median_heldout(self):
        e = self.heldout[np.isfinite(self.heldout)]
        return float(np.median(e)) if len(e) else math.nan

    def median_spread(self):
        """The median over sizes measured more than once of their repeat spread (NaN: none was)."""
        e = self.spread[np.isfinite(self.spread)]
        return float(np.median(e)) if len(e) else math.nan

    def cause(self, i, target):
        """Why size i's held-out error is large, the first rule that applies: (the cause, a
        detail of this size or '')."""
        g = next(g for g in self.segs if g.i0 <= i < g.i1)
        N = len(self.n)
        if i == 0 or i == N - 1:
            return "an end of the range: the other half extrapolates to it", ""
        if (i == g.i0 and g.i0 > 0) or (i == g.i1 - 1 and g.i1 < N):
            return "next to a breakpoint: the other half cannot place the regime change", ""
        if g.i1 - g.i0 < 2 * fit.MIN_POINTS:
            return (f"its segment holds {g.i1 - g.i0} sizes, too few for a half ({fit.MIN_POINTS} each) to fit "
                    "it: the half fit stretches a neighbour's line over it"), ""
        if self.spread[i] > target:
            return ("its repeats disagree: the runs (or rows) that measured it differ by more than the target, "
                    "the machine's variation rather than the line's"), f"; repeats {self.spread[i]:.0%} apart"
        if float(np.median(np.abs(g.resid))) > target / 2:
            return "the segment is not one line: curvature or a regime change inside it", ""
        if abs(self.resid[i]) > target:
            return ("noisy points, off the full fit itself by more than the target (load, or a warm-up that did "
                    "not converge: !)"), f"; {abs(self.resid[i]):.0%} off the fit{'!' if self.cold[i] else ''}"
        return (f"the half fits found {self.half_segments[0]} and {self.half_segments[1]} segments, "
                f"the full fit {len(self.segs)}"), ""

    def explain(self, target):
        """Lines saying where the held-out error exceeds target and why ([] when it does not)."""
        med = self.median_heldout()
        if math.isnan(med):
            return [f"no held-out error: {len(self.n)} sizes, a half fit needs {fit.MIN_POINTS} "
                    f"(measure {2 * fit.MIN_POINTS} or more sizes)"]
        bad_segs = [g for g in self.segs if self.seg_heldout(g)[0] > target]
        if med <= target and not bad_segs:
            return []
        lines = []
        if med > target:
            lines.append(f"median held-out error {med:.1%} > {target:.0%}")
        for g in bad_segs:
            lines.append(f"segment {tables.fmt_size(g.lo)}-{tables.fmt_size(g.hi)}: held-out median "
                         f"{self.seg_heldout(g)[0]:.1%} > {target:.0%}")
        over = [i for i in range(len(self.n)) if self.heldout[i] > target]
        by_cause = {}
        for i in over:
            c, detail = self.cause(i, target)
            by_cause.setdefault(c, []).append(f"{tables.fmt_size(self.n[i])} ({self.heldout[i]:.0%}{detail})")
        for c, pts in by_cause.items():
            lines.append(f"{', '.join(pts)}: {c}")
        return lines


def fit_all(ser, max_segments):
    """(fits [KeyFit], unfitted [(key, sizes, reason)])."""
    fits, unfitted = [], []
    for k, s in ser.items():
        if len(s["n"]) < fit.MIN_POINTS:
            why = f"{len(s['n'])} distinct sizes; a fit needs {fit.MIN_POINTS}"
            if s["excluded"]:
                why += f" ({len(s['excluded'])} points excluded: {s['excluded'][0][1]})"
            unfitted.append((k, len(s["n"]), why))
            continue
        fits.append(KeyFit(k, s, max_segments))
    return fits, unfitted


def pct(v):
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.1%}"


def fit_rows(fits):
    """One dict per segment (the calibration file's fits table, and the printed one)."""
    out = []
    for kf in fits:
        for j, g in enumerate(kf.segs):
            ho, nho = kf.seg_heldout(g)
            out.append(dict(zip(KEY, kf.key), segment=j, segments=len(kf.segs), lo=g.lo, hi=g.hi,
                            alpha=g.alpha, beta=g.beta, bandwidth=g.bandwidth / 1e9, points=g.i1 - g.i0,
                            resid_median=float(np.median(np.abs(g.resid))), resid_max=float(np.max(np.abs(g.resid))),
                            heldout_median=ho, heldout_points=nho, key_heldout_median=kf.median_heldout(),
                            key_spread_median=kf.median_spread()))
    return out


def table_text(fits, unfitted, excluded, notes, target):
    """The printed report: the fit table, the misses and why, what was not fitted, notes."""
    head = ["collective", "backend", "dtype", "ranks", "span", "tag", "seg", "range", "alpha (us)",
            "bandwidth (GB/s)", "points", "resid med", "resid max", "held-out seg", "held-out fit", "repeats apart"]
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" if i < 6 else "---:" for i in range(len(head))) + "|"]
    for r in fit_rows(fits):
        first = r["segment"] == 0
        keycols = [str(r[c]) if first else "" for c in KEY]
        if first and not r["tag"]:
            keycols[5] = "(none)"
        bw = "-" if math.isinf(r["bandwidth"]) else f"{r['bandwidth']:.4g}"
        out.append("| " + " | ".join(keycols + [
            f"{r['segment'] + 1}/{r['segments']}", f"{tables.fmt_size(r['lo'])}-{tables.fmt_size(r['hi'])}",
            f"{r['alpha'] * 1e6:.3g}", bw, str(r["points"]), pct(r["resid_median"]), pct(r["resid_max"]),
            pct(r["heldout_median"]), pct(r["key_heldout_median"]) if first else "",
            pct(r["key_spread_median"]) if first else ""]) + " |")
    text = "\n".join(out) + "\n"
    worse = [(kf, kf.explain(target)) for kf in fits]
    worse = [(kf, lines) for kf, lines in worse if lines]
    ok = sum(1 for kf in fits if kf.median_heldout() <= target)
    text += (f"\nHeld-out error (2-fold over sizes, target {target:.0%}): the median of {ok} of {len(fits)} fits "
             "within it" + ("." if not worse else f"; {len(worse)} fit(s) or their segments over it, where and why:")
             + "\n")
    for kf, lines in worse:
        text += f"- {key_text(kf.key)}:\n" + "".join(f"  - {ln}\n" for ln in lines)
    spreads = [kf.median_spread() for kf in fits if not math.isnan(kf.median_spread())]
    if spreads:
        text += (f"\nRepeats apart (a size measured in several rows, runs or placements: max/min - 1 of its times; "
                 f"the median over its sizes): {min(spreads):.1%} to {max(spreads):.1%} over {len(spreads)} fit(s). "
                 "The fits use each size's median; a held-out error near this spread is the machine's.\n")
    if unfitted:
        text += "\nNot fitted:\n" + "".join(f"- {key_text(k)}: {why}\n" for k, _, why in unfitted)
    if excluded:
        text += "\nPoints left out of a fit:\n" + "".join(f"- {key_text(k)} {tables.fmt_size(b)}: {why}\n"
                                                           for k, b, why in excluded)
    if notes:
        text += "\nNotes:\n" + "".join(f"- {n}\n" for n in notes)
    return text


def run_notes(rows):
    """Notes on the inputs: oversubscribed or unfinished runs, warm-ups that did not converge."""
    notes = []
    over = sorted({r["run_id"] for r in rows if r.get("oversubscribed")})
    if over:
        notes.append(f"{len(over)} run(s) oversubscribed (more ranks than cores): their times are the scheduler's")
    for rid, st in sorted({(r["run_id"], r.get("status")) for r in rows if r.get("status") != "ok"}):
        notes.append(f"run {rid} has status '{st}': its finished sizes are used")
    cold = [r for r in rows if r.get("warmup_converged") == 0]
    if cold:
        notes.append(f"{len(cold)} point(s) whose warm-up did not converge are used as measured")
    if any(not r["tag"] for r in rows):
        notes.append("runs without --tag: their fits carry tag '' and cannot be told from another fabric's")
    return notes


def _strings(rows, col):
    width = max([8] + [len(str(r[col]).encode()) for r in rows])
    return f"S{width}"


GEMM_COLS = [("part", "S"), ("m", "<i4"), ("n", "<i4"), ("k", "<i4"), ("flops", "<f8"), ("seconds", "<f8"),
             ("seconds_min", "<f8"), ("seconds_max", "<f8"), ("calls", "<i4"), ("runs", "<i4"), ("threads", "<i4"),
             ("roles", "S"), ("source", "S")]
RATE_COLS = [("op", "S"), ("phase", "S"), ("part", "S"), ("unit", "S"), ("seconds_per_unit", "<f8"),
             ("units_per_step", "<f8"), ("seconds_per_step", "<f8"), ("calls_per_step", "<f8"), ("source", "S")]
RATE_POOL_COLS = RATE_COLS + [("runs", "<i4"), ("spread", "<f8")]


def _dtype(cols, rows):
    return np.dtype([(c, _strings(rows or [{c: ""}], c) if t == "S" else t) for c, t in cols])


def _arr(rows, dt):
    return np.array([tuple(r[c].encode() if isinstance(r[c], str) else r[c] for c in dt.names) for r in rows], dtype=dt)


def write_compute(f, comp):
    """The /compute group: gemm, rates (pooled) and rate_runs (every run's), and attributes;
    comp None: empty tables (no --compute)."""
    g = f.create_group("compute")
    comp = comp or {"gemm": [], "rates": [], "rate_runs": [], "attrs": {"measured": 0}}
    for k, v in comp["attrs"].items():
        g.attrs[k] = v
    g.attrs["measured"] = int(bool(comp["gemm"] or comp["rates"]))
    if not g.attrs["measured"]:
        g.attrs["note"] = "no compute rates in this file: scripts/calibrate --compute measures them"
    g.attrs["notes"] = json.dumps(comp.get("notes", []))
    g["gemm"] = _arr(comp["gemm"], _dtype(GEMM_COLS, comp["gemm"]))
    g["rates"] = _arr(comp["rates"], _dtype(RATE_POOL_COLS, comp["rates"]))
    g["rate_runs"] = _arr(comp["rate_runs"], _dtype(RATE_COLS, comp["rate_runs"]))


def write(path, fits, unfitted, sources, argv, target, max_segments, comp=None):
    """The calibration file at path (written beside, then renamed over it); comp: the compute
    tables and attributes (run), None without --compute."""
    import h5py
    frows = fit_rows(fits)
    keyrows = [dict(zip(KEY, k)) for k, _, _ in unfitted] + frows
    kdt = [(c, "<i4" if c == "group_size" else _strings(keyrows or [{c: ""}], c)) for c in KEY]
    fits_t = np.dtype(kdt + [("segment", "<i4"), ("segments", "<i4"), ("lo", "<u8"), ("hi", "<u8"),
                             ("alpha", "<f8"), ("beta", "<f8"), ("bandwidth", "<f8"), ("points", "<i4"),
                             ("resid_median", "<f8"), ("resid_max", "<f8"), ("heldout_median", "<f8"),
                             ("heldout_points", "<i4"), ("key_heldout_median", "<f8"), ("key_spread_median", "<f8")])
    pts = []
    for kf in fits:
        for j, g in enumerate(kf.segs):
            for i in range(g.i0, g.i1):
                t, r = float(kf.t[i]), float(kf.resid[i])
                pts.append(dict(zip(KEY, kf.key), bytes=int(kf.n[i]), t=t, rows=kf.rows[i], segment=j,
                                t_fit=t * (1 + r), resid=r, heldout_err=float(kf.heldout[i]),
                                spread=float(kf.spread[i])))
    pts_t = np.dtype(kdt + [("bytes", "<u8"), ("t", "<f8"), ("rows", "<i4"), ("segment", "<i4"), ("t_fit", "<f8"),
                            ("resid", "<f8"), ("heldout_err", "<f8"), ("spread", "<f8")])
    reasons = [{"reason": w} for *_, w in unfitted] or [{"reason": ""}]
    un_t = np.dtype(kdt + [("sizes", "<i4"), ("reason", _strings(reasons, "reason"))])

    def arr(rows, dt):
        return np.array([tuple(r[c] if not isinstance(r[c], str) else r[c].encode() for c in dt.names) for r in rows],
                        dtype=dt)
    tmp = path + ".partial"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with h5py.File(tmp, "w") as f:
        a = f.attrs
        a["kind"] = KIND
        a["format_version"] = FORMAT_VERSION
        a["tool"] = "scripts/calibrate"
        a["argv"] = json.dumps(argv)
        a["created"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        a["sources"] = json.dumps(sources)
        c = f.create_group("collectives")
        c.attrs["model"] = ("t(n) = alpha + beta n on each segment [lo, hi] of measured sizes; n = the binaries' "
                            "size S in bytes (docs/collectives.md); alpha s, beta s/byte, bandwidth = 1e-9/beta GB/s")
        c.attrs["key"] = ",".join(KEY)
        c.attrs["time_statistic"] = (f"{TIME_STAT}: per iteration the slowest rank, median over iterations; a size "
                                     "in several rows counts once, at the median of their times")
        c.attrs["criterion"] = (f"k segments of >= {fit.MIN_POINTS} sizes, 1 <= k <= {max_segments}, minimising "
                                f"SAD + {fit.PENALTY} k, SAD the sum over all sizes of the absolute log ratios "
                                "|ln(t_fit/t)|; each segment's line: of the lines through two "
                                "of its points, flat through one or from the origin through one (alpha, beta >= 0), "
                                "the one of least SAD")
        c.attrs["heldout_rule"] = ("2-fold over sizes: refit (breakpoints included) on the even-indexed sizes, "
                                   "predict the odd, and the reverse; error |t_pred/t - 1|")
        c.attrs["heldout_target"] = target
        c.attrs["between_segments"] = ("a size between two segments' ranges takes the nearer in log size; outside "
                                       "every range it takes the end segment and is extrapolated")
        c["fits"] = arr(frows, fits_t)
        c["points"] = arr(pts, pts_t)
        c["unfitted"] = arr([dict(zip(KEY, k), sizes=n, reason=w) for k, n, w in unfitted], un_t)
        write_compute(f, comp)
    os.replace(tmp, path)


def read(path):
    """A calibration file as meshbench.reader.read_calibration returns it ({'attrs',
    'collective_attrs', 'fits', 'points', 'unfitted', 'compute'}); CalibrateError, one line
    naming the file, unless it is a readable calibration file of a format_version in
    reader.CALIBRATION_READS."""
    try:
        return reader.read_calibration(path)
    except reader.FormatError as e:
        raise CalibrateError(str(e))
    except OSError as e:
        raise CalibrateError(f"{path}: not a readable HDF5 file ({e})")
    except KeyError as e:
        raise CalibrateError(f"{path}: malformed calibration file: {e!r}")


# The options that only --compute reads (scripts/calibrate's parser leaves them None).
COMPUTE_FLAGS = ("compute_model", "compute_moe_model", "compute_mesh", "threads", "ranks", "steps", "warmup",
                 "compute_dir", "timeout")
COMPUTE_DEFAULTS = {"compute_model": compute.DEFAULT_MODEL, "compute_moe_model": compute.DEFAULT_MOE_MODEL,
                    "compute_mesh": None, "threads": 1, "ranks": 2, "steps": 3, "warmup": 1, "compute_dir": None,
                    "timeout": 600}


def compute_options(args):
    """The --compute options with their defaults; CalibrateError when one is given without
    --compute or is out of range, or step_bench (or mpiexec, for a run of several ranks) is
    not there."""
    given = [f"--{k.replace('_', '-')}" for k in COMPUTE_FLAGS if getattr(args, k, None) not in (None, [])]
    if not args.compute:
        if given:
            raise CalibrateError(f"{', '.join(given)}: only with --compute")
        return None
    o = {k: (getattr(args, k, None) if getattr(args, k, None) not in (None, []) else v)
         for k, v in COMPUTE_DEFAULTS.items()}
    for k in ("threads", "ranks", "steps", "timeout"):
        if o[k] < 1:
            raise CalibrateError(f"--{k} {o[k]}: at least 1")
    if o["warmup"] < 0:
        raise CalibrateError(f"--warmup {o['warmup']}: at least 0")
    try:
        o["entries"] = compute.entries(o["compute_model"], o["compute_moe_model"], o["ranks"], o["compute_mesh"])
    except compute.ComputeError as e:
        raise CalibrateError(str(e))
    o["exe"] = os.path.join(os.path.abspath(args.bin), "step_bench")
    if not os.access(o["exe"], os.X_OK):
        raise CalibrateError(f"--compute: {o['exe']} is not built (build it, or pass --bin)")
    o["mpiexec"] = args.mpiexec
    if any(e["ranks"] > 1 for e in o["entries"]) and shutil.which(args.mpiexec) is None:
        raise CalibrateError(f"--compute: {args.mpiexec} not found (the runs of several ranks need it; --mpiexec)")
    return o


def fit_predictor(fits):
    """predict(collective, group_size, bytes) -> seconds or None: the fits of one fabric tag
    (None when a collective's fits hold several tags or backends: no factor is guessed)."""
    by = {}
    for kf in fits:
        k = dict(zip(KEY, kf.key))
        if k["dtype"] == "float":
            by.setdefault((k["collective"], int(k["group_size"])), []).append(kf)

    def predict(coll, n, size):
        got = by.get((coll, n), [])
        return fit.predict(got[0].segs, size)[0] if len(got) == 1 else None
    return predict


def measure_compute(o, out, fits=()):
    """Run the compute measurement (meshbench.compute), print its progress and tables; returns
    the compute part of the calibration file. Raises compute.ComputeError or RunFailed."""
    folder, temporary = (o["compute_dir"], False) if o["compute_dir"] else compute.default_folder(out)
    print(f"calibrate --compute: {len(o['entries'])} profiled run(s) of step_bench, step files in {folder}"
          + (" (temporary)" if temporary else ""), flush=True)
    try:
        runs = compute.measure(o["entries"], {"exe": o["exe"], "mpiexec": o["mpiexec"], "steps": o["steps"],
                                              "warmup": o["warmup"], "threads": o["threads"], "folder": folder,
                                              "timeout": o["timeout"]})
        gemm, pooled, per_run, notes = compute.reduce_runs(runs, o["threads"])
    finally:
        if temporary:
            shutil.rmtree(folder, ignore_errors=True)
    notes = compute.check_runs(runs, o["threads"]) + notes
    if temporary:
        notes.append("the profiled step files were temporary (give --out or --compute-dir to keep them)")
    print()
    sys.stdout.write(compute.table_text(gemm, pooled, notes, runs))
    return {"gemm": gemm, "rates": pooled, "rate_runs": per_run, "notes": notes,
            "attrs": compute.attrs(runs, o["threads"], o["compute_model"],
                                   {"steps": o["steps"], "warmup": o["warmup"]},
                                   fit_predictor(fits) if fits else None)}


def run(args, argv):
    """scripts/calibrate after its flags are parsed; returns the exit code (HELP)."""
    fits, unfitted, rows, sources, notes, ser = [], [], [], [], [], {}
    try:
        target = args.target
        if not 0 < target < 10:
            raise CalibrateError(f"--target {target}: a fraction such as 0.1 (10%)")
        if not 1 <= args.max_segments <= 8:
            raise CalibrateError(f"--max-segments {args.max_segments}: 1 to 8")
        copts = compute_options(args)
        if not args.paths and not args.compute:
            raise CalibrateError("nothing to do: give collective results files or folders to fit, or --compute")
        if args.out and os.path.exists(args.out) and not args.force:
            raise CalibrateError(f"--out {args.out}: exists (a calibration file is never overwritten without --force)")
        if args.paths:
            rows, sources, notes = load(args.paths, args.where)
            ser = series(rows)
            fits, unfitted = fit_all(ser, args.max_segments)
            if not fits:
                raise CalibrateError("nothing to fit: " + "; ".join(f"{key_text(k)}: {w}" for k, _, w in unfitted))
    except CalibrateError as e:
        print(f"calibrate: {e}", file=sys.stderr)
        return 2
    if args.paths:
        excluded = [(k, b, why) for k, s in ser.items() for b, why in s["excluded"]]
        sys.stdout.write(f"calibrate: {len(rows)} rows from {len(sources)} file(s), {len(fits)} fits "
                         f"({sum(len(kf.segs) for kf in fits)} segments); time {TIME_STAT}\n\n")
        sys.stdout.write(table_text(fits, unfitted, excluded, notes + run_notes(rows), target))
    comp = None
    if copts is not None:
        if args.paths:
            print()
        try:
            comp = measure_compute(copts, args.out, fits)
        except compute.ComputeError as e:
            print(f"calibrate: {e}", file=sys.stderr)
            return 2
        except compute.RunFailed as e:
            print(f"calibrate: a compute run failed: {e}", file=sys.stderr)
            return 1
    if args.out:
        write(args.out, fits, unfitted, sources, argv, target, args.max_segments, comp)
        print(f"\ncalibrate: wrote {args.out}")
    if args.plot:
        if not fits:
            print("calibrate: --plot: no collective fits to draw")
        else:
            from .plot_fits import plot_fits
            for p in plot_fits(fits, args.plot, target):
                print(p)
    return 0
