#!/usr/bin/env bash
# --timing window (ReproMPI): runs and verifies at 2 ranks; the run stores every rank's clock
# offset and error against rank 0 at the start and the end (rank 0's are 0; on one host the
# true offset 0 lies within the error), the drift between them, and per size the timed calls
# dropped for a late start; with -n 6 a size keeps 6 valid iterations unless calls were
# dropped. Whether starts are late depends on load, so counts are checked, not asserted zero.
source "$(dirname "$0")/lib.bash"

f="$WORK/window.h5"
if expect_rc 0 2 all_reduce_bench --timing window -b 8 -e 4K -f 8 -n 6 -w 4 -O "$f"; then
  grep -q "# timing window (each call starts at a scheduled time" "$WORK/out" && pass "console names window timing" \
    || fail "console header lacks window timing"
  if py - "$f" <<'PY'
import h5py, json, sys
run = list(h5py.File(sys.argv[1])["runs"].values())[0]
a = run.attrs
assert a["timing"] == "window"
off, err = json.loads(a["clock_offset_s"]), json.loads(a["clock_error_s"])
end, drift = json.loads(a["clock_offset_end_s"]), json.loads(a["clock_drift"])
assert len(off) == len(err) == len(end) == len(drift) == 2
assert off[0] == 0 and err[0] == 0 and err[1] >= 0
assert abs(off[1]) <= err[1] + 1e-9, (off, err)   # one host: the true offset is 0
for g in run["collectives/all_reduce"].values():
    s = g["summary"][()]
    assert all(s["invalid"] >= 0) and all(s["wrong"] == 0)
    assert all((s["iters"] == 6) | ((s["iters"] < 6) & (s["invalid"] > 0))), s[["iters", "invalid"]]
print(f"offset {off[1]:.2e} +- {err[1]:.2e} s, drift {drift[1]:.2e}; dropped per size {list(s['invalid'])}")
PY
  then pass "clock offsets, errors, drift and late-start counts stored"; else fail "window timing file"; fi
  py "$MB_SRC/tests/mpi/h5check.py" crash "$f" ok 3 > "$WORK/check" 2>&1 || { fail "h5check"; cat "$WORK/check" >&2; }
fi
finish
