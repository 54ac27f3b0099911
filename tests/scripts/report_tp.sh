#!/usr/bin/env bash
# scripts/report's per-tensor-parallel-degree table (issue 10) on step_bench files written
# here at 2 ranks: dp=2 (tp 1), tp=2 all-reduce with --ranks-per-node 1 (its TP group spans
# two "nodes"), tp=2 --sp; one row per run in order of tp, the TP bytes equal the sum of the
# file's tp rows per rank and step, and the TP group's node span is shown.
. "$(dirname "$0")/lib.bash"
R="$MB_SRC/scripts/report"
[[ -x "$MB_BIN/step_bench" ]] || fail "no step_bench in $MB_BIN (MESHBENCH_WITH_ENGINE=OFF?)"
TINY=(--layers 1 --hidden 32 --heads 2 --seq 16 --vocab 64 --micro-batch 2 --steps 2 --warmup 0 --threads 1 --quiet)
mkdir -p "$WORK/tp"
run2 UCX_TLS=self,sm -- step_bench "${TINY[@]}" --mesh dp=2 -O "$WORK/tp/dp2.h5" || fail "dp=2 exit $?"
run2 UCX_TLS=self,sm -- step_bench "${TINY[@]}" --mesh tp=2 --ranks-per-node 1 -O "$WORK/tp/tp2.h5" || fail "tp=2 exit $?"
run2 UCX_TLS=self,sm -- step_bench "${TINY[@]}" --mesh tp=2 --sp -O "$WORK/tp/tp2sp.h5" || fail "tp=2 --sp exit $?"
pass "step_bench dp=2, tp=2, tp=2 --sp wrote 3 files"

py "$R" "$WORK/tp" -o "$WORK/tp.md" || fail "report md exit $?"
py - "$WORK/tp.md" "$WORK/tp/tp2.h5" "$WORK/tp/tp2sp.h5" <<'PY' || fail "per-TP table wrong: $(cat "$WORK/tp.md")"
import sys
import h5py
text = open(sys.argv[1]).read()
assert "Per tensor-parallel degree:" in text, text
lines = [l for l in text.split("Per tensor-parallel degree:")[1].splitlines() if l.startswith("| ") and not l.startswith("| tp")]
cells = [[c.strip() for c in l.strip("|").split("|")] for l in lines]
assert [c[0] for c in cells] == ["1", "2", "2"], cells
assert [c[1] for c in cells] == ["-", "AR", "SP"], cells
def tp_bytes(path):
    with h5py.File(path, "r") as f:
        (rid,) = f["runs"].keys()
        s = f["runs"][rid]["step"]
        steps = s["step_times"].shape[0]
        per = {}
        for c in s["comm"][()]:
            if c["dim"] == b"tp":
                per[c["kind"]] = max(per.get(c["kind"], 0), int(c["bytes"]))
        return sum(per.values()) / steps
def human(v):
    for unit, mult in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(v) >= mult:
            return f"{v / mult:.4g} {unit}"
    return f"{v:.0f} B"
assert cells[1][3] == human(tp_bytes(sys.argv[2])), (cells[1][3], tp_bytes(sys.argv[2]))
assert cells[2][3] == human(tp_bytes(sys.argv[3])), (cells[2][3], tp_bytes(sys.argv[3]))
assert cells[1][7] == "inter" and cells[2][7] == "intra", cells
assert float(cells[1][4]) >= 0 and cells[0][3] == "-", cells
print("per-TP table:", cells)
PY
pass "report: one row per TP degree, TP bytes equal the files, the TP group's node span"
