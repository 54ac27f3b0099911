#!/usr/bin/env bash
# scripts/report --baseline OLD --threshold P% (issue 23, regression mode) on made-up slowdowns:
# files written here in docs/results.md's layout whose numbers are known exactly (a test of
# the report, not of timing): collective points with 10 iterations (one round: the 95% CI of
# the median, x(2)..x(9)) and step plans with 3 rounds each (min-max of the rounds' medians),
# one tight and one noisy of each. A 1.3x slowdown of everything exits 1 (the tight ones are
# slower beyond the threshold and outside the noise; the noisy ones are within noise); a
# slowdown of only the noisy ones, a 3% slowdown, a speed-up, a 40% threshold exit 0; bad
# usage exits 2; no match exits 1 saying so. Every ratio and interval of the JSON output is
# checked against the numbers written. Then real files: step_bench and all_reduce_bench runs
# against themselves (exit 0, every ratio exactly 1) and against an h5py copy with every time
# multiplied by 1.3 (every ratio 1.3; exit 1 exactly when a verdict says slower).
. "$(dirname "$0")/lib.bash"
R="$MB_SRC/scripts/report"
G="$WORK/gen"
mkdir -p "$G"

py - "$G" <<'PY' || fail "writing the made-up files"
import json, sys
import h5py
import numpy as np
G = sys.argv[1]
ROW_T = np.dtype([("bytes", "<u8"), ("count", "<u8"), ("dtype", "S8"), ("redop", "S8"), ("inplace", "u1"),
                  ("root", "<i4"), ("t_median", "<f8"), ("t_min", "<f8"), ("t_mean", "<f8"), ("t_p99", "<f8"),
                  ("t_first", "<f8"), ("algbw", "<f8"), ("busbw", "<f8"), ("wrong", "<u8"), ("slowest_rank", "<i4"),
                  ("iters", "<i4")])
SPLIT_T = np.dtype([("rank", "<i4"), ("category", "S24"), ("seconds", "<f8")])
SUMMARY_T = np.dtype([("step_time_median", "<f8"), ("step_time_min", "<f8"), ("tokens_per_s", "<f8"),
                      ("mfu_measured_peak", "<f8"), ("bytes_match", "u1"), ("straggler_rank", "<i4"), ("check", "S8")])
# 10 iterations per size; rank 1 is the slower (the max over ranks is its time).
TIGHT = [10e-6 * (1 + 0.01 * k) for k in (3, 0, 7, 1, 9, 4, 2, 8, 5, 6)]           # 10.0 .. 10.9 us
NOISY = [100e-6 * f for f in (1.5, 1.0, 2.2, 1.1, 3.0, 1.3, 1.2, 2.5, 2.0, 1.7)]    # 100 .. 300 us
ROUNDS = {"dp2": [0.100, 0.104, 0.102], "tp2": [0.100, 0.200, 0.150]}              # step_time_median per round


def run_attrs(g, binary, i):
    for k, v in {"binary": binary, "tag": "shm", "backend": "mpi", "mem": "host", "timing": "isolated", "status": "ok",
                 "world_size": 2, "nodes": 1, "ranks_per_node": 2, "oversubscribed": 0, "iters": 10,
                 "start_time": f"2026-12-01T00:00:0{i}Z"}.items():
        g.attrs[k] = v


def collectives(path, k_tight, k_noisy):
    with h5py.File(path, "w") as f:
        f.attrs["schema_version"] = 1
        run = f.create_group("runs/20261201T000000.000-all_reduce_bench-1")
        run_attrs(run, "all_reduce_bench", 0)
        g = run.create_group("collectives/all_reduce/float-sum-out-of-place-world")
        for k, v in {"collective": "all_reduce", "placement": "out-of-place", "group": "world", "rank_stat": "max"}.items():
            g.attrs[k] = v
        rows, samples = np.zeros(2, ROW_T), np.zeros((2, 10, 2))
        for i, (b, t, k) in enumerate(((8, TIGHT, k_tight), (1 << 20, NOISY, k_noisy))):
            t = np.array(t) * k
            samples[i, :, 1] = t
            samples[i, :, 0] = t * 0.5
            rows[i] = (b, b // 4, b"float", b"sum", 0, -1, np.median(t), t.min(), t.mean(), np.percentile(t, 99), t[0],
                       b / np.median(t) / 1e9, b / np.median(t) / 1e9, 0, 1, 10)
        g["summary"] = rows
        g["samples"] = samples


def steps(path, k_by_plan):
    with h5py.File(path, "w") as f:
        f.attrs["schema_version"] = 1
        i = 0
        for plan, meds in ROUNDS.items():
            for m in meds:
                m *= k_by_plan[plan]
                run = f.create_group(f"runs/20261201T00000{i}.000-step_bench-{i}")
                run_attrs(run, "step_bench", i)
                i += 1
                s = run.create_group("step")
                deg = {"dp": 2 if plan == "dp2" else 1, "tp": 2 if plan == "tp2" else 1, "pp": 1, "cp": 1, "ep": 1}
                for k, v in {"strategy": "data_parallel" if plan == "dp2" else "tensor_parallel", "zero_stage": 0,
                             "degrees": json.dumps(deg), "order": "tp-cp-ep-dp-pp", "schedule": "accumulate",
                             "vpp": 1, "microbatches": 1, "global_batch": 8, "seq": 16, "layers": 2, "hidden": 32,
                             "phase_names": json.dumps(["forward", "backward", "grad_sync", "optimizer"])}.items():
                    s.attrs[k] = v
                s["step_times"] = np.array([[0.9 * m, m * 0.99], [0.9 * m, m], [0.9 * m, m * 1.01]])
                s["summary"] = np.array([(m, m * 0.99, 128 / m, 0.1 / m, 1, 1, b"off")], SUMMARY_T)
                s["time_split"] = np.array([(r, c, v * m) for r in (0, 1) for c, v in
                                            ((b"step", 1.0), (b"compute", 0.6), (b"exposed.dp", 0.1), (b"bubble", 0.0),
                                             (b"other", 0.3))], SPLIT_T)


collectives(f"{G}/c-base.h5", 1.0, 1.0)
collectives(f"{G}/c-slow.h5", 1.3, 1.3)        # everything 1.3x slower
collectives(f"{G}/c-noisy.h5", 1.0, 1.3)       # only the noisy point slower
collectives(f"{G}/c-3pct.h5", 1.03, 1.03)      # within the 5% threshold
collectives(f"{G}/c-fast.h5", 0.7, 0.7)        # faster
steps(f"{G}/s-base.h5", {"dp2": 1.0, "tp2": 1.0})
steps(f"{G}/s-slow.h5", {"dp2": 1.3, "tp2": 1.3})
steps(f"{G}/s-noisy.h5", {"dp2": 1.0, "tp2": 1.3})
PY
pass "made-up files: collectives (tight, noisy) and step plans (3 rounds, tight, noisy), scaled 1.3, 1.03, 0.7"

expect() {  # expect CODE LABEL ARGS...: scripts/report ARGS exits CODE
  local want=$1 label=$2; shift 2
  local rc=0
  py "$R" "$@" > "$WORK/out" 2> "$WORK/err" || rc=$?
  [[ $rc -eq $want ]] || fail "$label: exit $rc, want $want: $(cat "$WORK/out" "$WORK/err")"
}

# 1. A 1.3x slowdown of everything: the tight point and plan are slower outside the noise: exit 1.
expect 1 "1.3x collectives" "$G/c-slow.h5" --baseline "$G/c-base.h5" --threshold 5%
grep -q '^| all_reduce | 8 | 10.4[0-9]* (10.1[0-9]*-10.8[0-9]*) | 13.5[0-9]* (13.1[0-9]*-14.0[0-9]*) | 1.30 (1.2[0-9]*-1.3[0-9]*) | slower |$' "$WORK/out" \
  && grep -q '^| all_reduce | 1M | .* | within noise |$' "$WORK/out" \
  && grep -q '^- 1 of 2 match(es) slower beyond 5% and outside the noise: exit 1$' "$WORK/out" \
  || fail "1.3x collectives table: $(cat "$WORK/out")"
expect 1 "1.3x steps" "$G/s-slow.h5" --baseline "$G/s-base.h5" --threshold 5%
# rounded to 2 significant digits of each spread: 4 ms -> 0.1 ms, 100 ms -> 10 ms, 0.1 -> 0.01
grep -q '^| dp2 | 8 | 102.0 (100.0-104.0) | 132.6 (130.0-135.2) | 1.30 (1.25-1.35) | slower |$' "$WORK/out" \
  && grep -q '^| tp2 | 8 | 150 (100-200) | 200 (130-260) | 1.3 (0.7-2.6) | within noise |$' "$WORK/out" \
  || fail "1.3x steps table: $(cat "$WORK/out")"
expect 1 "1.3x both" "$G/c-slow.h5" "$G/s-slow.h5" --baseline "$G/c-base.h5" --baseline "$G/s-base.h5"
grep -q '^- 2 of 4 match(es) slower beyond 5% and outside the noise: exit 1$' "$WORK/out" || fail "both: $(cat "$WORK/out")"
pass "a 1.3x slowdown beyond the threshold and outside the noise exits 1 (collectives, steps, both); noisy matches read 'within noise'"

# 2. The JSON rows: medians, intervals and ratios equal the numbers written.
py "$R" "$G/c-slow.h5" "$G/s-slow.h5" --baseline "$G/c-base.h5" --baseline "$G/s-base.h5" -f json -o "$WORK/r.json" \
  && fail "json: exit 0 on a slowdown" || true
py - "$WORK/r.json" <<'PY' || fail "regression rows differ from the numbers written"
import json, math, sys
rows = json.load(open(sys.argv[1]))
TIGHT = sorted(10e-6 * (1 + 0.01 * k) for k in range(10))
NOISY = sorted(100e-6 * f for f in (1.5, 1.0, 2.2, 1.1, 3.0, 1.3, 1.2, 2.5, 2.0, 1.7))
def ci(v):  # 10 iterations: the 95% CI of the median is [x(2), x(9)] (order statistics, coverage 97.9%)
    return sorted(v)[1], sorted(v)[8]
def med(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
want = {}
for size, t in ((8, TIGHT), (1 << 20, NOISY)):
    old = (med(t), *ci(t))
    new = tuple(1.3 * x for x in old)
    want[("collective", size)] = (old, new, "95% CI of the median over 10")
for plan, meds in (("dp2", [0.100, 0.104, 0.102]), ("tp2", [0.100, 0.200, 0.150])):
    old = (med(meds), min(meds), max(meds))
    want[("step", plan)] = (old, tuple(1.3 * x for x in old), "min-max over 3 rounds")
assert len(rows) == 4, rows
for r in rows:
    k = (r["kind"], r["bytes"] if r["kind"] == "collective" else r["plan"])
    old, new, rule = want[k]
    for got, w in zip((r["old"], r["old_lo"], r["old_hi"], r["new"], r["new_lo"], r["new_hi"]), old + new):
        assert math.isclose(got, w, rel_tol=1e-12), (k, got, w)
    assert r["old_spread"].endswith(rule), (k, r["old_spread"], rule)
    assert math.isclose(r["ratio"], 1.3, rel_tol=1e-12), (k, r["ratio"])
    assert math.isclose(r["ratio_lo"], new[1] / old[2], rel_tol=1e-12) and \
        math.isclose(r["ratio_hi"], new[2] / old[1], rel_tol=1e-12), (k, r["ratio_lo"], r["ratio_hi"])
    tight = k in (("collective", 8), ("step", "dp2"))
    assert r["verdict"] == ("slower" if tight else "within noise"), (k, r["verdict"])
    assert (new[1] > old[2]) == tight  # the rule itself: slower = beyond 5% and wholly above
print("regression rows:", [(r["kind"], r.get("plan") or r.get("bytes"), r["verdict"]) for r in rows])
PY
pass "json: old and new medians, intervals (95% CI over 10 iterations; min-max over 3 rounds) and ratios equal the numbers written"

# 3. Within noise, within the threshold, faster, a looser threshold: exit 0.
expect 0 "noisy point only" "$G/c-noisy.h5" --baseline "$G/c-base.h5"
grep -q '| within noise |$' "$WORK/out" && grep -q '^| all_reduce | 8 | .* | within threshold |$' "$WORK/out" \
  || fail "noisy only: $(cat "$WORK/out")"
expect 0 "noisy plan only" "$G/s-noisy.h5" --baseline "$G/s-base.h5" --threshold 5%
expect 0 "3% slower" "$G/c-3pct.h5" --baseline "$G/c-base.h5" --threshold 5%
grep -q '^| all_reduce | 8 | .* | 1.03 (.*) | within threshold |$' "$WORK/out" || fail "3%: $(cat "$WORK/out")"
expect 0 "3% slower, threshold 1%" "$G/c-3pct.h5" --baseline "$G/c-base.h5" --threshold 1%
grep -q '^| all_reduce | 8 | .* | 1.03 (.*) | within noise |$' "$WORK/out" || fail "3% at 1%: $(cat "$WORK/out")"
expect 0 "faster" "$G/c-fast.h5" --baseline "$G/c-base.h5" --threshold 5%
grep -q '^| all_reduce | 8 | .* | faster |$' "$WORK/out" || fail "faster: $(cat "$WORK/out")"
expect 0 "threshold 40%" "$G/c-slow.h5" "$G/s-slow.h5" --baseline "$G/c-base.h5" --baseline "$G/s-base.h5" --threshold 40%
expect 0 "itself" "$G/c-base.h5" "$G/s-base.h5" --baseline "$G/c-base.h5" --baseline "$G/s-base.h5"
pass "within noise, within the threshold (3% at 5%; within the +-3.5% noise at 1%), faster, a 40% threshold, itself: exit 0"

# 4. Bad usage exits 2; nothing to judge exits 1 and says so.
for bad in 5 -5% abc% 5%% '' nan%; do
  expect 2 "--threshold '$bad'" "$G/c-slow.h5" --baseline "$G/c-base.h5" "--threshold=$bad"
  grep -q "report: --threshold takes a percentage such as 5%" "$WORK/err" || fail "--threshold '$bad': $(cat "$WORK/err")"
done
expect 2 "--threshold without --baseline" "$G/c-slow.h5" --threshold 5%
grep -q "report: --threshold needs --baseline OLD" "$WORK/err" || fail "$(cat "$WORK/err")"
expect 2 "missing baseline" "$G/c-slow.h5" --baseline "$G/none.h5"
expect 2 "--baseline with --compare" "$G/c-slow.h5" --baseline "$G/c-base.h5" --compare tag=a tag=b
expect 2 "bad filter" "$G/c-slow.h5" --baseline "$G/c-base.h5" --where nosuch=1
expect 1 "no match" "$G/c-slow.h5" --baseline "$G/s-base.h5"
grep -q "report: --baseline: nothing to judge" "$WORK/err" || fail "no match: $(cat "$WORK/err")"
pass "bad --threshold (5, -5%, abc%, ...), --threshold alone, a missing baseline, --compare, a bad filter: exit 2; no match: exit 1"

# 5. Real files: against themselves every ratio is 1 (exit 0); an h5py copy with every time x1.3
# reads 1.3 everywhere and exits 1 exactly when a verdict says slower.
[[ -x "$MB_BIN/step_bench" ]] || fail "no step_bench in $MB_BIN"
mkdir -p "$WORK/real"
run2 UCX_TLS=self,sm -- step_bench --model tiny --threads 1 --quiet --steps 3 --warmup 1 --mesh dp=2 -O "$WORK/real/dp2.h5" \
  || fail "step_bench exit $?"
run2 UCX_TLS=self,sm -- all_reduce_bench -b 8 -e 64K -f 64 -n 20 -w 2 -O "$WORK/real/ar.h5" || fail "all_reduce_bench exit $?"
expect 0 "real files against themselves" "$WORK/real" --baseline "$WORK/real" -f json
py -c 'import json,sys; r=json.load(open(sys.argv[1])); assert len(r) == 1 + 2 * 3 and all(x["ratio"] == 1 for x in r), r' \
  "$WORK/out" || fail "real files against themselves: $(cat "$WORK/out")"
mkdir -p "$WORK/slow"
py - "$WORK/real" "$WORK/slow" <<'PY' || fail "the 1.3x copy"
import shutil, sys
import h5py
for name in ("dp2.h5", "ar.h5"):
    dst = f"{sys.argv[2]}/{name}"
    shutil.copy(f"{sys.argv[1]}/{name}", dst)
    with h5py.File(dst, "r+") as f:
        for run in f["runs"].values():
            if "step" in run:
                s = run["step"]
                s["step_times"][...] = s["step_times"][()] * 1.3
                summ = s["summary"][()]
                for k in ("step_time_median", "step_time_min", "step_time_p99"):
                    summ[k] *= 1.3
                summ["tokens_per_s"] /= 1.3
                s["summary"][...] = summ
            for coll in run.get("collectives", {}).values():
                for g in coll.values():
                    summ = g["summary"][()]
                    for k in ("t_median", "t_min", "t_mean", "t_p99", "t_first"):
                        summ[k] *= 1.3
                    g["summary"][...] = summ
                    g["samples"][...] = g["samples"][()] * 1.3
PY
rc=0; py "$R" "$WORK/slow" --baseline "$WORK/real" -f json > "$WORK/out" 2> "$WORK/err" || rc=$?
py - "$WORK/out" "$rc" <<'PY' || fail "real 1.3x: exit $rc: $(cat "$WORK/out" "$WORK/err")"
import json, math, sys
rows, rc = json.load(open(sys.argv[1])), int(sys.argv[2])
assert len(rows) == 7 and all(math.isclose(r["ratio"], 1.3, rel_tol=1e-12) for r in rows), rows
assert all(r["verdict"] in ("slower", "within noise") for r in rows), rows
for r in rows:
    assert (r["verdict"] == "slower") == (r["new_lo"] > r["old_hi"]), r
assert rc == (1 if any(r["verdict"] == "slower" for r in rows) else 0), rc
print("real 1.3x:", [(r["kind"], r["verdict"]) for r in rows], "exit", rc)
PY
pass "real files: against themselves ratio 1, exit 0; x1.3 copies ratio 1.3, exit 1 exactly when one is slower outside the noise"
