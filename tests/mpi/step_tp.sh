#!/usr/bin/env bash
# Tensor parallel at 2 ranks (issue 10): --check against the single-rank reference (loss,
# every gradient gathered to full shape by name, updated parameters) with all-reduce and
# sequence parallel, re-gather on and off, overlap on and off, an untied head, grouped-query
# attention and a vocabulary the group does not divide (padded); the measured TP bytes equal
# the plan's exactly; the divisibility rules exit 2 naming the option.
source "$(dirname "$0")/lib.bash"
tiny=(--layers 2 --hidden 32 --heads 4 --kv-heads 2 --seq 16 --vocab 63 --micro-batch 2 --steps 2 --warmup 1
      --threads 1 --quiet)

run_check() {  # label, args...
  local label=$1; shift
  if expect_rc 0 2 step_bench --mesh tp=2 "${tiny[@]}" --check "$@"; then
    grep -q "check pass" "$WORK/out" && pass "$label: check pass" || fail "$label: no 'check pass' in output"
  fi
}
run_check "tp=2 all-reduce" -O "$WORK/ar.h5"
run_check "tp=2 all-reduce, no overlap, 2 micro-batches" --no-overlap --micro-batches 2
run_check "tp=2 untied head" --tied false
run_check "tp=2 --sp" --sp -O "$WORK/sp.h5"
run_check "tp=2 --sp --sp-regather false, 2 micro-batches" --sp --sp-regather false --micro-batches 2 -O "$WORK/spk.h5"
run_check "tp=2 --sp --no-overlap, untied" --sp --no-overlap --tied false

py - "$WORK/ar.h5" "$WORK/sp.h5" "$WORK/spk.h5" <<'PY' && pass "HDF5: tp bytes equal the plan's, strategy and padding recorded" || fail "HDF5 contents"
import json, sys
import h5py
def step(path):
    f = h5py.File(path, "r")
    (rid,) = f["runs"].keys()
    return f["runs"][rid]["step"]
L, N, C, sb = 2, 2 * 16, 32, 4
act, ce = N * C * sb, 3 * N * sb
for path, sp, regather, m in ((sys.argv[1], False, True, 1), (sys.argv[2], True, True, 1), (sys.argv[3], True, False, 2)):
    s = step(path)
    steps = s["step_times"].shape[0]
    assert s.attrs["strategy"] == ("tensor_parallel_sp" if sp else "tensor_parallel"), s.attrs["strategy"]
    assert json.loads(s.attrs["degrees"])["tp"] == 2
    assert int(s.attrs["vocab_padded"]) == 64
    comm = s["comm"][:]
    assert {c.decode() for c in comm["dim"]} == {"tp"}, comm["dim"]
    got = {}
    for c in comm:
        got.setdefault(c["kind"].decode(), []).append(int(c["bytes"]))
    if not sp:
        want = {"all_reduce": m * ((4 * L + 2) * act + ce)}
    else:
        r = 1 if regather else 0
        norms = (L * (3 * 32 + C) + 32 + C) * sb
        want = {"all_reduce": m * ce + norms, "all_gather": m * (L * (4 + 2 * r) + 2 + r) * act,
                "reduce_scatter": m * (4 * L + 2) * act}
    assert set(got) == set(want), (got, want)
    for k, v in want.items():
        assert got[k] == [steps * v] * 2, (path, k, got[k], steps * v)
    summ = s["summary"][0]
    assert summ["bytes_match"] == 1 and summ["check"] == b"pass", (summ["bytes_match"], summ["check"])
print("ok")
PY

# The rules, before any communicator exists: exit 2 with one message naming the option.
bad() {  # label, pattern, args...
  local label=$1 pat=$2; shift 2
  if expect_rc 2 2 step_bench "${tiny[@]}" "$@"; then
    grep -q -- "$pat" "$WORK/err" && pass "$label: exit 2 naming it" || fail "$label: message lacks '$pat'"
  fi
}
bad "heads % tp" "--heads 3 must be divisible by tp" --mesh tp=2 --hidden 48 --heads 3 --kv-heads 3
bad "kv_heads % tp" "--kv-heads 1 must be divisible by tp" --mesh tp=2 --kv-heads 1
bad "ffn % tp" "--ffn 65 must be divisible by tp" --mesh tp=2 --ffn 65
bad "seq % tp with --sp" "--seq 15 must be divisible by tp" --mesh tp=2 --sp --seq 15
bad "--sp without tp" "--sp: sequence parallel" --mesh dp=2 --sp
finish
