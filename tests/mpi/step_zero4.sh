#!/usr/bin/env bash
# ZeRO at 4 ranks (oversubscribed: correctness only): --check for every stage with 2
# micro-batches; the optimizer state per rank is a quarter of one rank's (equal shards of the
# padded flat array; the padding is stated in step/ attrs); a fault on rank 2 is caught.
source "$(dirname "$0")/lib.bash"
tiny=(--layers 1 --hidden 32 --heads 2 --seq 16 --vocab 64 --micro-batch 1 --steps 1 --warmup 0 --threads 1 --quiet)
for z in 1 2 3; do
  if expect_rc 0 4 step_bench --mesh dp=4 "${tiny[@]}" --check --zero $z --micro-batches 2 -O "$WORK/z$z.h5"; then
    grep -q "check pass" "$WORK/out" && pass "dp=4 zero $z m=2: check pass" || fail "dp=4 zero $z: no 'check pass'"
  fi
done
expect_rc 1 4 step_bench --mesh dp=4 "${tiny[@]}" --check --zero 2 --inject-fault 2 && pass "dp=4 zero 2 --inject-fault 2: exit 1"
expect_rc 0 1 step_bench --mesh dp=1 "${tiny[@]}" --zero 1 -O "$WORK/one.h5" && pass "dp=1 zero 1 runs"
# One rank: ZeRO holds the state, so --check compares with the single-rank reference too.
for z in 2 3; do
  if expect_rc 0 1 step_bench --mesh dp=1 "${tiny[@]}" --zero $z --check; then
    grep -q "check pass" "$WORK/out" && pass "dp=1 zero $z: check pass" || fail "dp=1 zero $z: no 'check pass'"
  fi
done
py - "$WORK" <<'PY' && pass "optimizer state at dp=4 is 1/4 of dp=1's, up to the stated padding" || fail "memory"
import sys
import h5py
w = sys.argv[1]
def opt(name):
    f = h5py.File(f"{w}/{name}.h5", "r")
    (rid,) = f["runs"].keys()
    s = f["runs"][rid]["step"]
    rows = [r for r in s["memory"][:] if r["category"] == b"optimizer"]
    return [r["measured_bytes"] for r in rows], int(s.attrs["grad_elements"]), int(s.attrs["zero_padding_elements"])
one, p1, pad1 = opt("one")
four, p4, pad4 = opt("z1")
assert len(four) == 4 and len(set(four)) == 1, four          # equal shards
assert four[0] == 8 * p4 / 4 and one[0] == 8 * p1, (four, one, p4, p1)
# the flat arrays differ only in padding: 16 x dp elements per unit at most
assert abs(four[0] - one[0] / 4) <= 8 * (pad4 + pad1) / 4 + 1e-9, (four[0], one[0] / 4, pad4, pad1)
print("ok: optimizer bytes per rank", four[0], "at dp=4;", one[0], "at dp=1; padding", pad4, pad1)
PY
finish
