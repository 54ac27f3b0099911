#!/usr/bin/python3
"""tests/mpi/compose_check.py: one composed plan's run (issue 14, "Composition, proven"), read
back from its HDF5 file and its console output. Exit 0 when every check holds, else 1 with
every failed check listed.

  compose_check.py FILE.h5 STDOUT DIMS [--group DIM=RANKS]... [--memory-exact CATS]

DIMS: the communication the plan must have, comma-separated `dim` or `dim:kind` (e.g.
"tp,pp,dp:reduce_scatter,dp:all_gather,embedding"). Checks:
  - step/summary: check == pass and bytes_match == 1 (every analytic row equals the traced
    payload over the timed steps, and no traced payload lacks an analytic row);
  - step/check: every row passes, the coverage row among them (every element held somewhere);
  - step/comm: the dims with traced bytes are exactly DIMS' dims (each listed kind present),
    so a dimension missing from the trace cannot pass trivially;
  - the console's communication table: a row for each of DIMS with an analytic value, and no
    MISMATCH anywhere;
  - --memory-exact CATS: step/memory's measured bytes equal the analytic on every rank for
    each category in CATS ("params,grads,optimizer");
  - --group DIM=RANKS: topology/groups holds group 0 of DIM as RANKS ("0,4"), i.e. the rank
    order put the ranks where the order string says.
"""
import argparse
import re
import sys

import h5py

errors = []


def check(cond, msg):
    if not cond:
        errors.append(msg)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("h5")
    ap.add_argument("stdout")
    ap.add_argument("dims")
    ap.add_argument("--group", action="append", default=[])
    ap.add_argument("--memory-exact", default="", help="categories whose measured bytes equal the analytic on every rank")
    a = ap.parse_args()
    path, stdout = a.h5, a.stdout
    groups = [g.split("=", 1) for g in a.group]
    want = [(d.split(":")[0], d.split(":")[1] if ":" in d else None) for d in a.dims.split(",")]
    want_dims = {w[0] for w in want}
    with h5py.File(path, "r") as f:
        (rid,) = f["runs"].keys()
        run = f["runs"][rid]
        step = run["step"]
        s = step["summary"][0]
        check(s["check"] == b"pass", f"summary check is {s['check']!r}, want b'pass'")
        check(s["bytes_match"] == 1, "summary bytes_match is 0: some dimension's traced bytes differ from the plan's")
        rows = step["check"][()]
        names = [r["quantity"].decode() for r in rows]
        check("coverage" in names, "no coverage row in step/check")
        bad = [n for n, r in zip(names, rows) if not r["pass"]]
        check(not bad, f"check rows failed: {bad}")
        traced = {}
        for c in step["comm"][()]:
            if c["bytes"] > 0:
                traced.setdefault(c["dim"].decode(), set()).add(c["kind"].decode())
        check(set(traced) == want_dims, f"dims with traced bytes {sorted(traced)} != the plan's {sorted(want_dims)}")
        for dim, kind in want:
            if kind is not None:
                check(kind in traced.get(dim, set()), f"no traced {dim} {kind} (traced {sorted(traced.get(dim, []))})")
        for cat in filter(None, a.memory_exact.split(",")):
            mem = [r for r in step["memory"][()] if r["category"].decode() == cat]
            check(len(mem) == int(run.attrs["world_size"]), f"memory {cat}: {len(mem)} rows")
            off = [(r["rank"], r["measured_bytes"], r["analytic_bytes"]) for r in mem
                   if r["measured_bytes"] != r["analytic_bytes"]]
            check(not off, f"memory {cat}: measured != analytic on (rank, measured, analytic) {off}")
        topo = run["topology/groups"][()]
        for dim, ranks in groups:
            g0 = [g["ranks"].decode() for g in topo if g["dim"].decode() == dim and g["id"] == 0]
            check(g0 == [ranks], f"{dim} group 0 holds ranks {g0}, want {ranks}")
    text = open(stdout).read()
    check("MISMATCH" not in text, "the console's table flags a MISMATCH")
    row = re.compile(r"^\s+(\w+) (\w+)\s+[\d.]+\s+\d+\s+\d+\s+(\S+)\s", re.M)
    table = {(m.group(1), m.group(2)): m.group(3) for m in row.finditer(text)}
    for dim in want_dims:
        mine = {k: v for (d, k), v in table.items() if d == dim}
        check(mine, f"no {dim} row in the console's communication table")
        check(all(v != "-" for v in mine.values()), f"{dim}: a row without an analytic value: {mine}")
    if errors:
        for e in errors:
            print(f"compose_check: {path}: {e}", file=sys.stderr)
        sys.exit(1)
    print(f"compose_check: {sorted(want_dims)} traced and equal to the plan's; check pass")


if __name__ == "__main__":
    main()
