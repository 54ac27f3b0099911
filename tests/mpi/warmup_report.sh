#!/usr/bin/env bash
# Adaptive warm-up and --min-time, judged from what the binary stores, never from how fast:
# (1) a warm-up capped below two windows cannot show stability: every size must be reported
#     as not converged (console '!' and footnote, summary warmup_converged 0, 5 calls);
# (2) the defaults: each size has >= 20 iterations, and either its slowest rank's timed calls
#     add up to --min-time or it stopped at --max-iters; warm-up made >= 1 call, judged 0/1;
# (3) -n and -w given mean exactly that many (warmup_converged -1);
# (4) --rank-stat avg: the headline is the median of the per-iteration average over ranks.
source "$(dirname "$0")/lib.bash"

f="$WORK/cap.h5"
if expect_rc 0 2 all_reduce_bench -b 64 -e 512 -f 8 --inplace no -n 3 --warmup-max 5 -O "$f"; then
  grep -q "warm-up not converged at 2 points" "$WORK/out" && pass "console footnote names 2 points" \
    || { fail "no 'not converged' footnote"; cat "$WORK/out" >&2; }
  [[ $(grep -cE '^ +(64|512) .* 5! ' "$WORK/out") -eq 2 ]] && pass "rows marked 5!" || fail "rows not marked '5!'"
  py - "$f" <<'PY' && pass "summary: warmup_converged 0, warmup_calls 5" || fail "summary of the capped warm-up"
import h5py, sys
g = list(list(h5py.File(sys.argv[1])["runs"].values())[0]["collectives/all_reduce"].values())[0]
s = g["summary"][()]
assert len(s) == 2 and all(s["warmup_converged"] == 0) and all(s["warmup_calls"] == 5), s
PY
fi

f="$WORK/auto.h5"
if expect_rc 0 2 all_reduce_bench -b 8 -e 64K -f 16 --min-time 0.02 --max-iters 400 -O "$f" -q; then
  py - "$f" <<'PY' && pass "defaults: >= 20 iterations, --min-time or --max-iters reached" || fail "adaptive loop rule"
import h5py, numpy as np, sys
run = list(h5py.File(sys.argv[1])["runs"].values())[0]
assert run.attrs["warmup"] == -1 and not run.attrs["iters_fixed"]
for g in run["collectives/all_reduce"].values():
    s, x = g["summary"][()], g["samples"][()]
    for i, r in enumerate(s):
        k = int(r["iters"])
        assert 20 <= k <= 400, k
        assert k == 400 or np.nansum(x[i], axis=0).max() >= 0.02, (k, np.nansum(x[i], axis=0))
        assert r["warmup_converged"] in (0, 1) and r["warmup_calls"] >= 1, r
PY
  py "$MB_SRC/tests/mpi/h5check.py" crash "$f" ok 2 > "$WORK/check" 2>&1 || { fail "h5check"; cat "$WORK/check" >&2; }
fi

f="$WORK/fixed.h5"
if expect_rc 0 2 all_reduce_bench -b 8 -e 1K -f 16 -n 7 -w 3 --rank-stat avg -O "$f" -q; then
  py - "$f" <<'PY' && pass "-n 7 -w 3 exactly; --rank-stat avg headline" || fail "fixed loop or rank-stat"
import h5py, numpy as np, sys
run = list(h5py.File(sys.argv[1])["runs"].values())[0]
assert run.attrs["rank_stat"] == "avg"
for g in run["collectives/all_reduce"].values():
    s, x = g["summary"][()], g["samples"][()]
    assert x.shape[1] == 7 and all(s["iters"] == 7) and all(s["warmup_calls"] == 3) and all(s["warmup_converged"] == -1)
    for i, r in enumerate(s):
        assert np.isclose(r["t_median"], np.median(x[i].mean(axis=1)), rtol=1e-12)
        assert np.isclose(r["t_median_max"], np.median(x[i].max(axis=1)), rtol=1e-12)
        assert np.isclose(r["t_median_rank0"], np.median(x[i][:, 0]), rtol=1e-12)
PY
fi
finish
