#!/usr/bin/env bash
# step_bench's thread count (issue 23): by default the rank's cores shared among the ranks on
# its host, at least 1, printed with the rule and stored; more threads than cores are flagged
# oversubscribed in the console header and the run's attributes; OMP_NUM_THREADS wins over the
# default and --threads over both.
source "$(dirname "$0")/lib.bash"
SHAPE=(--layers 1 --hidden 32 --heads 2 --seq 8 --vocab 16 --steps 1 --warmup 0)
cores=$(nproc)
want=$(( cores / 2 > 0 ? cores / 2 : 1 ))
attrs() {  # FILE -> "threads rule oversubscribed"
  py -c "
import h5py, sys
r = list(h5py.File(sys.argv[1])['runs'].values())[0]
print(r['step'].attrs['threads'], '|', r['step'].attrs['threads_rule'], '|', int(r.attrs['oversubscribed']))" "$1"
}
unset OMP_NUM_THREADS
if expect_rc 0 2 step_bench "${SHAPE[@]}" -O "$WORK/default.h5"; then
  a=$(attrs "$WORK/default.h5")
  [[ "$a" == "$want | $cores cores / 2 ranks on host "*" | 0" || ( $cores -lt 2 && "$a" == "1 |"* ) ]] \
    && grep -q "threads per rank: $want ($cores cores / 2 ranks on host" "$WORK/out" \
    && pass "default: $a" || fail "default threads: $a; $(grep 'threads per rank' "$WORK/out")"
fi
if OMP_NUM_THREADS=1 expect_rc 0 2 step_bench "${SHAPE[@]}" -O "$WORK/omp.h5"; then
  a=$(attrs "$WORK/omp.h5")
  [[ "$a" == "1 | OMP_NUM_THREADS | 0" ]] && pass "OMP_NUM_THREADS=1: $a" || fail "OMP_NUM_THREADS: $a"
fi
over=$((cores + 1))
if expect_rc 0 2 step_bench "${SHAPE[@]}" --threads "$over" -O "$WORK/over.h5"; then
  a=$(attrs "$WORK/over.h5")
  [[ "$a" == "$over | --threads | 1" ]] && grep -q "OVERSUBSCRIBED: more threads than cores" "$WORK/out" \
    && pass "--threads $over on $cores cores: $a, flagged" || fail "--threads $over: $a; $(grep 'threads per rank' "$WORK/out")"
fi
finish
