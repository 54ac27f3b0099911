#!/usr/bin/env bash
# scripts/report --expect-order, on files whose numbers are written here (a test of the report,
# not of timing): shm is physically faster than tcp-lo, so a point where tcp-lo reads more than
# 20% faster is flagged, one where it reads 4% faster (noise) is not, and neither is a point
# where the order holds. Warm-up that did not converge is noted. Also through --compare.
source "$(dirname "$0")/lib.bash"

"$MB_PYTHON" - "$WORK" <<'PY'
import h5py, numpy as np, sys
# A minimal file in docs/results.md's layout: the fields scripts/report reads.
row_t = np.dtype([("bytes", "<u8"), ("count", "<u8"), ("dtype", "S8"), ("redop", "S8"), ("inplace", "u1"),
                  ("root", "<i4"), ("t_median", "<f8"), ("t_min", "<f8"), ("t_mean", "<f8"), ("t_p99", "<f8"),
                  ("t_first", "<f8"), ("algbw", "<f8"), ("busbw", "<f8"), ("wrong", "<u8"),
                  ("slowest_rank", "<i4"), ("iters", "<i4"), ("warmup_calls", "<i4"), ("warmup_converged", "i1"),
                  ("t_median_max", "<f8"), ("t_median_avg", "<f8"), ("t_median_min", "<f8"), ("t_median_rank0", "<f8")])
def make(path, tag, times_us, converged):
    with h5py.File(path, "w") as f:
        f.attrs["schema_version"] = 1
        run = f.create_group(f"runs/20261201T000000-all_reduce_bench-{tag}")
        for k, v in {"binary": "all_reduce_bench", "tag": tag, "backend": "mpi", "mem": "host", "timing": "isolated",
                     "status": "ok", "world_size": 2, "nodes": 1, "ranks_per_node": 2, "oversubscribed": 0,
                     "iters": 20, "start_time": "2026-12-01T00:00:00Z"}.items():
            run.attrs[k] = v
        g = run.create_group("collectives/all_reduce/float-sum-out-of-place-world")
        for k, v in {"collective": "all_reduce", "placement": "out-of-place", "group": "world",
                     "rank_stat": "max", "warmup": -1}.items():
            g.attrs[k] = v
        rows = np.zeros(len(times_us), row_t)
        for i, (b, t) in enumerate(zip([8, 8192, 1 << 20], times_us)):
            t *= 1e-6
            rows[i] = (b, b // 4, b"float", b"sum", 0, -1, t, t, t, t, t, b / t / 1e9, b / t / 1e9, 0, 0, 100,
                       100, converged[i], t, t, t, t)
        g["summary"] = rows
make(sys.argv[1] + "/shm.h5", "shm", [1.0, 3.0, 250.0], [1, 1, 1])
make(sys.argv[1] + "/tcp.h5", "tcp-lo", [7.0, 2.0, 240.0], [1, 0, 1])
PY
out=$("$MB_PYTHON" "$MB_SRC/scripts/report" "$WORK" --expect-order tag=shm,tcp-lo,netns) || fail "report exit $?"
grep -q "1 point(s) break the fabric order tag=shm,tcp-lo,netns" <<< "$out" || fail "no order verdict: $out"
grep -q "suspect: tag=tcp-lo reads 1.50x faster than tag=shm at all_reduce out-of-place 8K" <<< "$out" \
  || fail "8 KiB inversion not flagged: $out"
[[ $(grep -c "suspect:" <<< "$out") -eq 1 ]] || fail "flagged more than the 8 KiB point (1 MiB is within 20%): $out"
grep -q "1 point(s) whose warm-up did not converge" <<< "$out" || fail "no warm-up note: $out"
pass "8 KiB inversion (1.5x) flagged; 1 MiB (1.04x) and 8 B (order holds) not; warm-up note"
cmp=$("$MB_PYTHON" "$MB_SRC/scripts/report" "$WORK" --compare tag=shm tag=tcp-lo --expect-order tag=shm,tcp-lo) \
  || fail "compare exit $?"
grep -q "suspect: tag=tcp-lo reads 1.50x faster" <<< "$cmp" || fail "compare without the verdict: $cmp"
pass "--compare carries the verdict"
err=$("$MB_PYTHON" "$MB_SRC/scripts/report" "$WORK" -f csv --expect-order tag=shm,tcp-lo 2>&1 >/dev/null) || true
grep -q "suspect:" <<< "$err" || fail "csv: verdict not on stderr"
rc=0; "$MB_PYTHON" "$MB_SRC/scripts/report" "$WORK" --expect-order tag=shm 2> "$WORK/e" > /dev/null || rc=$?
[[ $rc -eq 2 ]] && grep -q "expect-order" "$WORK/e" || fail "one value: exit $rc, want 2 with a message"
pass "csv verdict on stderr; a one-value order refused (exit 2)"
