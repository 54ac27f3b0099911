#!/usr/bin/env bash
# all_to_allv_bench (issue 13) at 2 and 4 ranks under every routing workload: every run exits
# 0 with every received element verified (wrong == 0 in HDF5), the count column is tokens per
# rank, and the byte columns follow README "all_to_allv_bench": h5check.py recomputes the
# balanced routing's per-rank bytes exactly (send S, largest receive, bytes sent between
# ranks) and bounds the others; busbw = total_bytes / n / t on every row. Then the imbalance
# itself: at the same sizes, hot-rank's largest receive exceeds balanced's, by at least the
# hot tokens' share (half of every rank's tokens send all k pairs to the hot rank).
source "$(dirname "$0")/lib.bash"

ARGS=(-n 2 -w 1 -b 0 -e 64K -f 4 --hidden 8 --top-k 2 --experts 8 -d int32,double -q)
SWEEP=0:65536:4
for n in 2 4; do
  for routing in balanced hot-expert hot-rank zipf:1.2 rotating; do
    f="$WORK/${routing/:/_}-$n.h5"
    expect_rc 0 "$n" all_to_allv_bench "${ARGS[@]}" --routing "$routing" -O "$f" || continue
    if py "$MB_SRC/tests/mpi/h5check.py" verify "$f" all_to_allv "$n" "$SWEEP" --dtypes=int32,double \
         > "$WORK/check" 2>&1; then
      pass "$routing at $n ranks: $(cut -d: -f3 "$WORK/check" | tr -d '\n')"
    else
      fail "$routing at $n ranks:"; cat "$WORK/check" >&2
    fi
  done
  if py - "$WORK/balanced-$n.h5" "$WORK/hot-rank-$n.h5" "$n" > "$WORK/check" 2>&1 <<'PY'; then
import sys, h5py
bal, hot, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
def rows(path):
    with h5py.File(path, "r") as h:
        (run,) = h["runs"].values()
        g = run["collectives/all_to_allv/int32-none-out-of-place-world"]
        return [(int(z["count"]), int(z["bytes"]), int(z["recv_bytes_per_rank"])) for z in g["sizes"][()]]
for (t, S, rb), (t2, S2, rh) in zip(rows(bal), rows(hot)):
    assert (t, S) == (t2, S2), (t, S, t2, S2)
    if t >= 4:
        # The hot rank gets n ranks x round(T/2) hot tokens x all k pairs, plus its share of the rest.
        hot_floor = n * round(t / 2) * S // t
        assert rh >= hot_floor and rh > rb, f"{t} tokens: hot-rank max recv {rh}, balanced {rb}, floor {hot_floor}"
print("hot-rank receives more than balanced")
PY
    pass "$n ranks: $(cat "$WORK/check")"
  else
    fail "$n ranks: imbalance:"; cat "$WORK/check" >&2
  fi
done

finish
