#!/usr/bin/env bash
# Context parallel at 2 ranks (issue 12): --check against the single-rank reference (loss,
# every gradient, the updated parameters) for ring, all-gather and Ulysses, zig-zag and
# contiguous splits, the ring's overlap off, summed gradients over 2 micro-batches and an
# untied head; the injected fault is caught; the measured CP bytes equal the plan's exactly;
# with zig-zag the ranks' attention FLOPs in the trace are equal, with the contiguous split
# the last rank's are 2x the first's (chunk pairs whose keys all follow the queries are
# skipped; a diagonal pair runs in full); the rules exit 2 naming the option.
source "$(dirname "$0")/lib.bash"
tiny=(--layers 2 --hidden 32 --heads 4 --kv-heads 2 --seq 16 --vocab 64 --micro-batch 2 --steps 2 --warmup 1
      --threads 1 --quiet)

run_check() {  # label, args...
  local label=$1; shift
  if expect_rc 0 2 step_bench --mesh cp=2 "${tiny[@]}" --check "$@"; then
    grep -q "check pass" "$WORK/out" && pass "$label: check pass" || fail "$label: no 'check pass' in output"
  fi
}
run_check "cp=2 ring zig-zag" --profile -O "$WORK/ring.h5"
run_check "cp=2 all-gather" --cp-algo allgather -O "$WORK/ag.h5"
run_check "cp=2 ulysses" --cp-algo ulysses -O "$WORK/ul.h5"
run_check "cp=2 ring contiguous" --cp-split contiguous --profile -O "$WORK/contig.h5"
run_check "cp=2 ring, no overlap, sum over 2 micro-batches" --no-overlap --grad-reduce sum --micro-batches 2
run_check "cp=2 all-gather contiguous, untied" --cp-algo allgather --cp-split contiguous --tied false
expect_rc 1 2 step_bench --mesh cp=2 "${tiny[@]}" --check --inject-fault 1 && pass "cp=2 --inject-fault 1: exit 1"

py - "$WORK/ring.h5" "$WORK/ag.h5" "$WORK/ul.h5" "$WORK/contig.h5" <<'PY' && pass "HDF5: cp bytes equal the plan's; zig-zag attention FLOPs equal, contiguous 2x" || fail "HDF5 contents"
import sys
import h5py
import numpy as np
def step(path):
    f = h5py.File(path, "r")
    (rid,) = f["runs"].keys()
    return f["runs"][rid]["step"]
L, B, S, C, hs, sb = 2, 2, 16, 2, 8, 4
rows, q, kv = B * S // C, 4 * hs, 2 * hs
n = rows * 2 * kv * sb
want = {"ring": {"sendrecv": L * (3 * C - 2) * n},
        "allgather": {"all_gather": L * 2 * C * n, "reduce_scatter": L * C * n},
        "ulysses": {"all_to_all": L * 2 * rows * (2 * q + 2 * kv) * sb}}
for path, algo in ((sys.argv[1], "ring"), (sys.argv[2], "allgather"), (sys.argv[3], "ulysses"), (sys.argv[4], "ring")):
    s = step(path)
    steps = s["step_times"].shape[0]
    assert s.attrs["strategy"] == "context_parallel_" + algo, s.attrs["strategy"]
    got = {}
    for c in s["comm"][()]:
        if c["dim"] == b"cp":
            got.setdefault(c["kind"].decode(), []).append(int(c["bytes"]))
    assert set(got) == set(want[algo]), (path, got)
    for k, v in want[algo].items():
        assert got[k] == [steps * v] * 2, (path, k, got[k], steps * v)
    assert s["summary"][0]["bytes_match"] == 1
def attention_flops(path):
    ev = step(path)["events"][()]
    a = ev[np.char.startswith(ev["kind"], b"attention.")]
    return [float(a[a["rank"] == r]["flops"].sum()) for r in (0, 1)]
z, c = attention_flops(sys.argv[1]), attention_flops(sys.argv[4])
assert z[0] > 0 and z[0] == z[1], ("zig-zag attention FLOPs differ", z)
assert c[1] == 2 * c[0], ("contiguous: last rank should do 2x", c)
print("ok: attention FLOPs per rank zig-zag", z, "contiguous", c)
PY

bad() {  # label, pattern, args...
  local label=$1 pat=$2; shift 2
  if expect_rc 2 2 step_bench "${tiny[@]}" "$@"; then
    grep -q -- "$pat" "$WORK/err" && pass "$label: exit 2 naming it" || fail "$label: message lacks '$pat'"
  fi
}
bad "seq % 2cp (zig-zag)" "--seq 18 must be divisible by 4" --mesh cp=2 --seq 18
bad "ulysses heads % cp" "--heads 3 per tensor-parallel rank (3) must be divisible by cp" --mesh cp=2 --cp-algo ulysses --heads 3 --kv-heads 3 --hidden 48
bad "--cp-algo value" "--cp-algo" --mesh cp=2 --cp-algo spiral
finish
