#!/usr/bin/python3
"""tests/mpi/h5check.py: checks of the collective binaries' HDF5 files for the MPI tests,
written from docs/results.md (not from the C++ code). Exit 0 when every check holds, else
1 with every failed check listed.

  h5check.py verify FILE COLLECTIVE WORLD SWEEP...  every run ok; every (dtype, op, placement)
      series the MPI backend supports is present, once per SWEEP (b:e:f, one run each, in
      order); the sizes table equals the sweep rounded down to the collective's granularity;
      per-rank/total bytes, bus factor, algbw/busbw follow the README; wrong == 0; no NaN.
      Options: --dtypes a,b  --ops a,b  (what was asked for; default every MPI one)
      all_to_allv: the size axis is tokens (bytes // (elt * top_k * hidden), from the run's
      attributes), out of place only, busbw = total_bytes / n / t; balanced routing's per-rank
      bytes are recomputed exactly here, other routings' bounded (send = S, S <= max recv <= nS).
  h5check.py fault FILE COLLECTIVE        status failed, and every row with data has wrong == 1
  h5check.py crash FILE STATUS [MIN_ROWS]  status == STATUS; sizes/summary/samples have equal
      row counts >= MIN_ROWS (default 2) in every series; no NaN in any present row
  h5check.py readable FILE    every run's attributes and every dataset read in full
  h5check.py batch LIST       each line of LIST one of the checks above (its words as above):
      one Python start for many files; prints "ok   LINE: what held" or "FAIL LINE: why" a line
"""
import math
import sys

import h5py
import numpy as np

MPI_DTYPES = {"float": 4, "double": 8, "int32": 4, "int8": 1}
MPI_OPS = ["sum", "prod", "min", "max"]
REDUCES = {"all_reduce", "reduce_scatter"}
GRAN_N = {"all_gather", "reduce_scatter", "all_to_all"}  # granularity: n elements, else 1

errors = []


def check(cond, msg):
    if not cond:
        errors.append(msg)
    return cond


def s(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def factor(coll, n):
    if coll == "all_reduce":
        return 2.0 * (n - 1) / n
    if coll in ("all_gather", "reduce_scatter", "all_to_all", "all_to_allv"):
        return (n - 1) / n
    return 1.0


def byte_rules(coll, count, elt, n):
    """(send_bytes_per_rank, recv_bytes_per_rank, total_bytes) of docs/results.md."""
    S = count * elt
    if coll == "all_gather":
        return S // n, S, S
    if coll == "reduce_scatter":
        return S, S // n, S * n
    if coll == "broadcast":
        return S, S, S
    return S, S, S * n  # all_reduce, all_to_all, sendrecv


def a2av_bytes(routing, T, k, H, E, n, elt):
    """all_to_allv (send_bytes_per_rank, max recv bytes, bytes sent between ranks) from README:
    balanced sends pair i of rank r (i < T*k) to expert (r*T*k + i) mod E, on rank expert // (E/n).
    None for the other routings (their draws are the seed's)."""
    if routing != "balanced":
        return None
    per = E // n
    m = [[0] * n for _ in range(n)]
    for r in range(n):
        for i in range(T * k):
            m[r][((r * T * k + i) % E) // per] += 1
    recv = max(sum(m[f][t] for f in range(n)) for t in range(n))
    off = sum(m[f][t] for f in range(n) for t in range(n) if f != t)
    return T * k * H * elt, recv * H * elt, off * H * elt


def sweep(b, e, f):
    out, x = [], b
    while x <= e:
        out.append(x)
        if x == 0:
            x = 1
            continue
        x *= f
    return out


def counts(coll, n, elt, b, e, f, unit=1):
    """The count column: elements (all_to_allv: tokens of `unit` elements)."""
    g = n if coll in GRAN_N else 1
    out = []
    for nbytes in sweep(b, e, f):
        c = nbytes // elt // unit if coll == "all_to_allv" else nbytes // elt // g * g
        if c == 0 and nbytes != 0:
            continue
        if not out or out[-1] != c:
            out.append(c)
    return out


def series_of(h):
    """[(run_id, run, collective, name, group)] in file order of runs."""
    out = []
    for rid in sorted(h["runs"]):
        run = h["runs"][rid]
        for coll in run.get("collectives", {}):
            for name, g in run["collectives"][coll].items():
                out.append((rid, run, coll, name, g))
    return out


def check_series_values(tag, g, coll, n):
    sizes, summ, samp = g["sizes"][()], g["summary"][()], g["samples"][()]
    rows = len(summ)
    check(len(sizes) == rows and samp.shape[0] == rows, f"{tag}: rows sizes={len(sizes)} summary={rows} samples={samp.shape}")
    iters = int(g.attrs["iters"])
    row_iters = [int(r["iters"]) for r in summ]
    width = max(row_iters, default=iters)
    check(samp.shape[1:] == (width, n), f"{tag}: samples shape {samp.shape}, want [rows, {width} (most iterations), {n}]")
    for i, k in enumerate(row_iters):
        dropped = int(summ[i]["invalid"]) if "invalid" in summ.dtype.names else 0  # window: late starts
        check(k >= iters or dropped > 0, f"{tag} row {i}: {k} iterations, fewer than -n {iters}")
        check(not np.isnan(samp[i, :k]).any(), f"{tag} row {i}: NaN in samples (among its {k} iterations)")
        check(np.isnan(samp[i, k:]).all(), f"{tag} row {i}: values past its {k} iterations")
        check(np.isfinite(samp[i, :k]).all() and (samp[i, :k] >= 0).all(), f"{tag} row {i}: negative or infinite samples")
        w = int(g.attrs["warmup"])
        conv = int(summ[i]["warmup_converged"])
        if w >= 0:
            check(int(summ[i]["warmup_calls"]) == w and conv == -1, f"{tag} row {i}: fixed warm-up {w}, got "
                  f"{summ[i]['warmup_calls']} calls, converged {conv}")
        else:
            check(conv in (0, 1) and int(summ[i]["warmup_calls"]) > 0, f"{tag} row {i}: adaptive warm-up {summ[i]}")
    want_f = factor(coll, n)
    check(math.isclose(float(g.attrs["bus_factor"]), want_f, rel_tol=1e-12, abs_tol=1e-15),
          f"{tag}: bus_factor attr {g.attrs['bus_factor']}, want {want_f}")
    stat = s(g.attrs["rank_stat"]) if "rank_stat" in g.attrs else "max"
    for i, r in enumerate(summ):
        t = float(r["t_median"])
        it = samp[i, :row_iters[i]]
        by_stat = {"max": it.max(axis=1), "avg": it.mean(axis=1), "min": it.min(axis=1), "rank0": it[:, 0]}
        for k, v in by_stat.items():
            check(math.isclose(float(r[f"t_median_{k}"]), float(np.median(v)), rel_tol=1e-12),
                  f"{tag} row {i}: t_median_{k} {r[f't_median_{k}']} != median of per-iteration {k} {np.median(v)}")
        slowest = by_stat[stat]  # per iteration, the --rank-stat over ranks (default the slowest rank)
        check(math.isclose(t, float(np.median(slowest)), rel_tol=1e-12),
              f"{tag} row {i}: t_median {t} != median of per-iteration {stat} {np.median(slowest)}")
        check(math.isclose(float(r["t_min"]), float(slowest.min()), rel_tol=1e-12), f"{tag} row {i}: t_min")
        check(math.isclose(float(r["t_mean"]), float(slowest.mean()), rel_tol=1e-9), f"{tag} row {i}: t_mean")
        check(math.isclose(float(r["t_p99"]), float(np.percentile(slowest, 99)), rel_tol=1e-12), f"{tag} row {i}: t_p99")
        check(r["t_min"] <= r["t_median"] <= r["t_p99"], f"{tag} row {i}: t_min <= t_median <= t_p99 fails")
        check(0 <= r["slowest_rank"] < n, f"{tag} row {i}: slowest_rank {r['slowest_rank']} not in [0, {n})")
        check(math.isfinite(r["t_first"]) and r["t_first"] >= 0, f"{tag} row {i}: t_first {r['t_first']}")
        nbytes = int(r["bytes"])
        if nbytes > 0:
            check(t > 0, f"{tag} row {i}: t_median {t} not > 0 at {nbytes} B")
            check(math.isclose(float(r["algbw"]), nbytes / t / 1e9, rel_tol=1e-12),
                  f"{tag} row {i}: algbw {r['algbw']} != bytes/t_median/1e9 = {nbytes / t / 1e9}")
        if coll == "all_to_allv":  # the bytes actually sent between ranks, per rank
            want_bus = int(sizes[i]["total_bytes"]) / n / t / 1e9 if t > 0 else 0.0
            check(math.isclose(float(r["busbw"]), want_bus, rel_tol=1e-12, abs_tol=1e-300),
                  f"{tag} row {i}: busbw {r['busbw']} != total_bytes/n/t_median/1e9 {want_bus}")
        else:
            check(math.isclose(float(r["busbw"]), float(r["algbw"]) * want_f, rel_tol=1e-12, abs_tol=1e-300),
                  f"{tag} row {i}: busbw {r['busbw']} != algbw*{want_f}")
        check(int(sizes[i]["bytes"]) == nbytes and int(sizes[i]["count"]) == int(r["count"]),
              f"{tag} row {i}: sizes and summary disagree")
    return summ, sizes


def verify(path, coll, n, sweeps, dtypes, ops):
    with h5py.File(path, "r") as h:
        runs = sorted(h["runs"])
        check(len(runs) == len(sweeps), f"{path}: {len(runs)} runs, want {len(sweeps)}")
        for rid in runs:
            run = h["runs"][rid]
            check(s(run.attrs["status"]) == "ok", f"{rid}: status {s(run.attrs['status'])}")
            check(int(run.attrs["world_size"]) == n, f"{rid}: world_size {run.attrs['world_size']}")
        placements = {"broadcast": ["in-place"], "all_to_allv": ["out-of-place"]}.get(coll, ["out-of-place", "in-place"])
        redops = ops if coll in REDUCES else ["none"]
        total_rows = 0
        factors = set()
        for k, (rid, sw) in enumerate(zip(runs, sweeps)):
            b, e, f = sw
            ra = h["runs"][rid].attrs
            k, H = (int(ra["top_k"]), int(ra["hidden"])) if coll == "all_to_allv" else (1, 1)
            colls = h["runs"][rid]["collectives"]
            check(list(colls) == [coll], f"{rid}: collectives {list(colls)}, want [{coll}]")
            if coll not in colls:
                continue
            names = set(colls[coll])
            want = {f"{d}-{o}-{p}-world" for d in dtypes for o in redops for p in placements}
            check(names == want, f"{rid}: series {sorted(names)} != {sorted(want)}")
            for name in sorted(names & want):
                g = colls[coll][name]
                factors.add(round(float(g.attrs["bus_factor"]), 4))
                d = name.split("-")[0]
                elt = MPI_DTYPES[d]
                tag = f"{rid}/{name}"
                summ, sizes = check_series_values(tag, g, coll, n)
                want_counts = counts(coll, n, elt, b, e, f, k * H)
                got_counts = [int(x) for x in sizes["count"]]
                check(got_counts == want_counts, f"{tag}: counts {got_counts} != {want_counts} (sweep {b}:{e}:{f})")
                for i, r in enumerate(summ):
                    c = int(r["count"])
                    z = sizes[i]
                    got = (int(z["send_bytes_per_rank"]), int(z["recv_bytes_per_rank"]), int(z["total_bytes"]))
                    S = c * k * H * elt
                    check(int(z["bytes"]) == S, f"{tag} row {i}: bytes {z['bytes']} != count*elt {S}")
                    if coll == "all_to_allv":
                        want = a2av_bytes(s(ra["routing"]), c, k, H, int(ra["experts"]), n, elt)
                        if want is None:
                            check(got[0] == S and S <= got[1] <= n * S and got[2] <= n * S,
                                  f"{tag} row {i}: send/recv/total {got} outside send = S = {S}, S <= recv <= nS, total <= nS")
                        else:
                            check(got == want, f"{tag} row {i}: send/recv/total {got} != {want} (balanced routing)")
                    else:
                        want = byte_rules(coll, c, elt, n)
                        check(got == want, f"{tag} row {i}: send/recv/total {got} != {want}")
                    check(int(r["wrong"]) == 0, f"{tag} row {i} ({c} elements): wrong = {r['wrong']}")
                    check(s(r["dtype"]) == d and s(r["redop"]) == name.split("-")[1],
                          f"{tag} row {i}: dtype/redop columns {s(r['dtype'])}/{s(r['redop'])}")
                    check(int(r["inplace"]) == (1 if "-in-place-" in name else 0), f"{tag} row {i}: inplace column")
                total_rows += len(summ)
        return total_rows, sorted(factors)


def fault(path, coll):
    with h5py.File(path, "r") as h:
        for rid, run, c, name, g in series_of(h):
            check(s(run.attrs["status"]) == "failed", f"{rid}: status {s(run.attrs['status'])}, want failed")
            check(c == coll, f"{rid}: collective {c}")
            summ = g["summary"][()]
            check(len(summ) > 0, f"{rid}/{name}: no rows")
            for r in summ:
                if int(r["count"]) > 0:
                    check(int(r["wrong"]) == 1, f"{rid}/{name} {r['bytes']} B: wrong = {r['wrong']}, want 1 (one flipped element)")
        runs = list(h["runs"])
        check(len(runs) == 1, f"{path}: {len(runs)} runs")
        check(sum(int(r["wrong"]) for _, _, _, _, g in series_of(h) for r in g["summary"][()]) > 0, f"{path}: no wrong element at all")


def crash(path, status, min_rows):
    with h5py.File(path, "r") as h:
        runs = list(h["runs"])
        check(len(runs) == 1, f"{path}: {len(runs)} runs")
        for rid in runs:
            got = s(h["runs"][rid].attrs["status"])
            check(got == status, f"{rid}: status {got}, want {status}")
        ser = series_of(h)
        check(len(ser) > 0, f"{path}: no series")
        for rid, run, c, name, g in ser:
            n_sz, n_sm, n_sa = len(g["sizes"]), len(g["summary"]), g["samples"].shape[0]
            check(n_sz == n_sm == n_sa, f"{rid}/{name}: rows sizes={n_sz} summary={n_sm} samples={n_sa}")
            check(n_sm >= min_rows, f"{rid}/{name}: {n_sm} rows, want >= {min_rows}")
            samp = g["samples"][()][:n_sm]
            summ = g["summary"][()]
            for i, r in enumerate(summ):
                check(not np.isnan(samp[i, :int(r["iters"])]).any(), f"{rid}/{name}: NaN in the samples of finished row {i}")
            check(all(math.isfinite(float(r["t_median"])) and r["t_median"] > 0 for r in summ),
                  f"{rid}/{name}: a finished row has no t_median")
        print(f"{path}: status {status}, rows per series {[len(g['summary']) for *_, g in ser]}")


def readable(path):
    """Every run's attributes and every dataset of the file, read in full."""
    counts = {"runs": 0, "datasets": 0}

    def visit(_name, obj):
        if isinstance(obj, h5py.Dataset):
            obj[()]
            counts["datasets"] += 1
        dict(obj.attrs)

    try:
        with h5py.File(path, "r") as f:
            for rid, run in f["runs"].items():
                counts["runs"] += 1
                dict(run.attrs)
                run.visititems(visit)
            statuses = sorted({s(r.attrs["status"]) for r in f["runs"].values()})
        print(f"{path}: {counts['runs']} runs ({', '.join(statuses)}), {counts['datasets']} datasets read")
    except Exception as e:  # noqa: BLE001 - any failure to read is the finding
        check(False, f"{path}: {type(e).__name__}: {e}")


def run_check(words):
    """One check (words as on the command line after the script's name); returns what it
    verified, or None for a bad command. Failed checks go to `errors`."""
    cmd = words[0]
    if cmd == "verify":
        args = [a for a in words[1:] if not a.startswith("--")]
        opts = dict(a[2:].split("=", 1) for a in words[1:] if a.startswith("--"))
        path, coll, n = args[0], args[1], int(args[2])
        sweeps = [tuple(int(x) for x in sw.split(":")) for sw in args[3:]]
        dtypes = opts.get("dtypes", ",".join(MPI_DTYPES)).split(",")
        ops = opts.get("ops", ",".join(MPI_OPS)).split(",")
        rows, factors = verify(path, coll, n, sweeps, dtypes, ops)
        return f"{path}: {coll} at {n} ranks: {rows} rows verified, bus factor {', '.join(map(str, factors))}"
    if cmd == "fault":
        fault(words[1], words[2])
        return f"{words[1]}: status failed, the flipped elements counted"
    if cmd == "crash":
        crash(words[1], words[2], int(words[3]) if len(words) > 3 else 2)
        return f"{words[1]}: status {words[2]}"
    if cmd == "readable":
        readable(words[1])
        return f"{words[1]}: readable"
    return None


def batch(path):
    """Every line of `path` a check; each one's verdict printed; 1 if any failed."""
    failed = 0
    for line in open(path).read().splitlines():
        if not line.strip():
            continue
        before = len(errors)
        try:
            done = run_check(line.split())
        except Exception as e:  # a file that does not open, a missing dataset
            errors.append(f"{type(e).__name__}: {e}")
            done = ""
        if done is None:
            errors.append(f"unknown check {line!r}")
        if len(errors) > before:
            failed += 1
            print(f"FAIL {line}: " + "; ".join(errors[before:before + 5]))
        else:
            print(f"ok   {line}: {done}")
    return 1 if failed else 0


def main(argv):
    if len(argv) < 3:
        print(__doc__)
        return 2
    if argv[1] == "batch":
        return batch(argv[2])
    done = run_check(argv[1:])
    if done is None:
        print(__doc__)
        return 2
    if not errors and argv[1] == "verify":
        print(done)
    for e in errors[:40]:
        print(f"h5check: {e}", file=sys.stderr)
    if len(errors) > 40:
        print(f"h5check: ... and {len(errors) - 40} more", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
