#!/usr/bin/env bash
# The checkers can fail: a good 2-rank file passes h5check.py and hdf5_readback.py, and each
# single corruption of a copy (a value the README defines, a status, a NaN sample, a .jsonl
# line) must make them exit 1 naming what is wrong. Guards against a checker that passes
# everything (docs/architecture.md: a test that cannot fail is a defect).
source "$(dirname "$0")/lib.bash"

good="$WORK/good.h5"
expect_rc 0 2 all_reduce_bench -n 3 -w 1 -d int32 -o sum -b 64 -e 4K -f 8 --tag self -O "$good" -q || { finish; exit 1; }
H5C="$MB_SRC/tests/mpi/h5check.py"
verify=(verify all_reduce 2 64:4096:8 --dtypes=int32 --ops=sum)
py "$H5C" "${verify[0]}" "$good" "${verify[@]:1}" > "$WORK/check" 2>&1 && pass "good file verifies" \
  || { fail "good file does not verify:"; cat "$WORK/check" >&2; }

# corrupt NAME PATTERN PYTHON: copy the good file, apply PYTHON (h = the open file, g = the
# out-of-place series), and require `h5check verify` to fail with PATTERN in its message.
corrupt() {
  local name=$1 pattern=$2 code=$3 f="$WORK/$1.h5"
  cp "$good" "$f"
  py - "$f" <<EOF
import sys, h5py, numpy as np
h = h5py.File(sys.argv[1], "r+")
run = list(h["runs"].values())[0]
g = run["collectives/all_reduce/int32-sum-out-of-place-world"]
def edit(ds, field, fn, row=0):
    a = ds[()]
    a[field][row] = fn(a[field][row])
    ds[...] = a
$code
h.close()
EOF
  if py "$H5C" "${verify[0]}" "$f" "${verify[@]:1}" > "$WORK/check" 2>&1; then
    fail "$name: the checker passed a corrupted file"
  elif ! grep -qF -- "$pattern" "$WORK/check"; then
    fail "$name: failed without naming '$pattern':"; cat "$WORK/check" >&2
  else
    pass "$name caught: $(grep -F -- "$pattern" "$WORK/check" | head -1 | cut -c1-120)"
  fi
}

corrupt busbw "busbw" 'edit(g["summary"], "busbw", lambda v: v * 1.01, 1)'
corrupt algbw "algbw" 'edit(g["summary"], "algbw", lambda v: v * 2, 2)'
corrupt t_median "t_median" 'edit(g["summary"], "t_median", lambda v: v * 1.5, 0)'
corrupt slowest "slowest_rank" 'edit(g["summary"], "slowest_rank", lambda v: 2, 0)'
corrupt wrong "wrong = 1" 'edit(g["summary"], "wrong", lambda v: 1, 1)'
corrupt total_bytes "send/recv/total" 'edit(g["sizes"], "total_bytes", lambda v: v + 1, 0)'
corrupt count "counts" 'edit(g["sizes"], "count", lambda v: v - 1, 2)'
corrupt nan_sample "NaN in samples" 's = g["samples"]; a = s[()]; a[1, 0, 1] = np.nan; s[...] = a'
corrupt factor_attr "bus_factor attr" 'g.attrs["bus_factor"] = 0.5'
corrupt status "status failed" 'run.attrs["status"] = "failed"'
corrupt world "world_size" 'run.attrs["world_size"] = 4'
corrupt missing_series "series" 'del run["collectives/all_reduce/int32-sum-in-place-world"]'

# Crash checker: a NaN in a finished row, and a status that is not the one expected.
cp "$good" "$WORK/crash.h5"
py "$H5C" crash "$WORK/crash.h5" ok 3 > /dev/null 2>&1 || fail "crash check rejects the good file"
py "$H5C" crash "$WORK/crash.h5" running 3 > /dev/null 2>&1 && fail "crash check passed status ok as running" \
  || pass "crash check: wrong status caught"
py "$H5C" crash "$WORK/crash.h5" ok 4 > /dev/null 2>&1 && fail "crash check passed 3 rows as >= 4" \
  || pass "crash check: too few rows caught"
cp "$WORK/nan_sample.h5" "$WORK/crash2.h5"
py "$H5C" crash "$WORK/crash2.h5" ok 3 > "$WORK/check" 2>&1 && fail "crash check passed a NaN in a finished row" \
  || pass "crash check: NaN in a finished row caught"

# Fault checker: a good run is not a failed one.
py "$H5C" fault "$good" all_reduce > /dev/null 2>&1 && fail "fault check passed a run without faults" \
  || pass "fault check: a clean run is rejected"

# Read-back: one .jsonl value changed.
cat > "$WORK/expect.json" <<'EOF'
{"runs": [{"binary": "all_reduce_bench", "collective": "all_reduce", "world_size": 2, "tag": "self",
  "series": 2, "iters": 3, "warmup": 1, "argv_has": ["--tag self"]}]}
EOF
py "$MB_SRC/tests/mpi/hdf5_readback.py" "$good" "$WORK/expect.json" > "$WORK/check" 2>&1 \
  || { fail "read-back rejects the good file:"; cat "$WORK/check" >&2; }
cp "$good" "$WORK/jl.h5"
sed '2s/"t_median":[0-9.e-]*/"t_median":1.0/' "${good%.h5}.jsonl" > "$WORK/jl.jsonl"
if py "$MB_SRC/tests/mpi/hdf5_readback.py" "$WORK/jl.h5" "$WORK/expect.json" > "$WORK/check" 2>&1; then
  fail "read-back passed a changed .jsonl line"
else
  grep -q "jsonl t_median" "$WORK/check" && pass "read-back: changed .jsonl t_median caught" \
    || { fail "read-back failed without naming jsonl t_median:"; cat "$WORK/check" >&2; }
fi

# The batch mode: one line that holds and one that does not exit 1 and name only the second
# (tests/mpi/lib.bash batch_check relies on both).
printf 'verify %s %s\nverify %s all_reduce 4 64:4096:8 --dtypes=int32 --ops=sum\n' \
  "$good" "${verify[*]:1}" "$good" > "$WORK/list"
rc=0; py "$H5C" batch "$WORK/list" > "$WORK/check" 2>&1 || rc=$?
if [[ $rc -eq 1 && $(grep -c '^ok   verify' "$WORK/check") -eq 1 && $(grep -c '^FAIL verify.* 4 64:4096:8' "$WORK/check") -eq 1 ]] \
   && grep -q "world_size" "$WORK/check"; then
  pass "batch: the good line ok, the wrong world size FAIL, exit 1"
else
  fail "batch: exit $rc:"; cat "$WORK/check" >&2
fi

finish
