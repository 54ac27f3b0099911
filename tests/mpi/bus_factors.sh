#!/usr/bin/env bash
# Bus-bandwidth factors and byte-count rules of each collective, tested through the binaries
# themselves (the specs live in each binary's main file) at n = 1, 2, 4 and 8 ranks: the
# series' bus_factor attribute and busbw/algbw of every row must be all-reduce 2(n-1)/n;
# all-gather, reduce-scatter, all-to-all (n-1)/n; broadcast, send/recv 1; and the sizes table
# must hold the requested sizes rounded down to the granularity (100 B and 1000 B of int32:
# 25 and 250 elements, 24 and 248 where n divides the count) with the per-rank and total
# bytes of docs/results.md. h5check.py computes the expectations independently.
# all_to_allv (balanced routing, 2 x 4 elements per token): the size axis is tokens, the
# block's factor the nominal (n-1)/n, each row's busbw the bytes sent between ranks / n / t.
source "$(dirname "$0")/lib.bash"

COLLS=(all_reduce all_gather reduce_scatter all_to_all broadcast sendrecv all_to_allv)
for n in 1 2 4 8; do
  for c in "${COLLS[@]}"; do
    f="$WORK/$c-$n.h5"
    extra=(); [[ $c == all_to_allv ]] && extra=(--hidden 4)
    expect_rc 0 "$n" "${c}_bench" -n 1 -w 0 -d int32 -o sum -b 100 -e 1000 -f 10 "${extra[@]}" -O "$f" -q || continue
    echo "verify $f $c $n 100:1000:10 --dtypes=int32 --ops=sum" >> "$WORK/files"
  done
done
# Every file in one Python process (h5py's start is 0.2 s a file): the bus factor and byte counts.
batch_check "$WORK/files"

finish
