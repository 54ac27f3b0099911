#!/usr/bin/env bash
# Every collective x every MPI dtype x every op x both placements, verified, at 2 and 4 ranks:
# `-d all -o all` (bf16/half and avg are skipped with a note on MPI) over two sweeps per run
# file: 0..8 B (0 elements and the smallest count the collective allows, 1 element where the
# granularity is 1) and a non-power-of-two sweep up to a few MiB (3000 B x 31^k, rounded down
# to the granularity). Every run must exit 0, and h5check.py proves from the HDF5 file that
# every series ran at exactly the expected sizes with 0 wrong elements, the documented byte
# counts and bus factors. One pipelined run as well. 4 ranks oversubscribe 2 cores: smaller
# sweep there (and the ucx_yield shim). all_to_allv (balanced routing, 8 KiB float tokens by
# default) runs the same sweeps in whole tokens: the 0..8 B sweep is its 0-token row.
source "$(dirname "$0")/lib.bash"

COLLS=(all_reduce all_gather reduce_scatter all_to_all broadcast sendrecv all_to_allv)
LOOP=(-n 2 -w 1)

for n in 2 4; do
  if [[ $n -le $CORES ]]; then big=(3000 3145728 31); else big=(3000 102400 31); fi
  for c in "${COLLS[@]}"; do
    f="$WORK/$c-$n.h5"
    t0=$SECONDS
    expect_rc 0 "$n" "${c}_bench" "${LOOP[@]}" -d all -o all -b 0 -e 8 -f 2 -O "$f" || continue
    # -d all / -o all name what they skip instead of failing (not under -q).
    grep -q "skipped.*bf16" "$WORK/out" && grep -q "skipped.*half" "$WORK/out" \
      || fail "$c -n $n: no 'skipped bf16/half' note in the output"
    if [[ $c == all_reduce || $c == reduce_scatter ]]; then
      grep -q "skipped.*avg" "$WORK/out" || fail "$c -n $n: no 'skipped ... avg' note"
    fi
    expect_rc 0 "$n" "${c}_bench" "${LOOP[@]}" -d all -o all -b "${big[0]}" -e "${big[1]}" -f "${big[2]}" \
      -O "$f" --append -q || continue
    pass "$c at $n ranks: both sweeps ran in $((SECONDS - t0))s"
    echo "verify $f $c $n 0:8:2 ${big[0]}:${big[1]}:${big[2]}" >> "$WORK/files"
  done
done
# The 14 files in one Python process (h5py's start is 0.2 s a file): sizes, bytes, factors, 0 wrong.
batch_check "$WORK/files"

# Pipelined timing (back-to-back calls timed as a batch): same checks at one size range.
f="$WORK/pipelined.h5"
if expect_rc 0 2 all_reduce_bench -n 4 -w 1 --timing pipelined -d int32,float -o sum,max -b 0 -e 64K -f 8 -O "$f" -q; then
  if py "$MB_SRC/tests/mpi/h5check.py" verify "$f" all_reduce 2 0:65536:8 --dtypes=int32,float --ops=sum,max \
       > "$WORK/check" 2>&1 \
     && py -c "import h5py,sys; h=h5py.File(sys.argv[1]); r=h['runs'][list(h['runs'])[0]]; sys.exit(r.attrs['timing']!='pipelined')" "$f"; then
    pass "pipelined all_reduce"
  else
    fail "pipelined all_reduce:"; cat "$WORK/check" >&2
  fi
fi

finish
