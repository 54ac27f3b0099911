#!/usr/bin/env bash
# The checker can fail: --inject-fault RANK flips one element of that rank's result before
# verification. For every collective, on rank 0 and on the last rank, at 2 ranks (and the last
# rank of 4 once per collective): exit code 1, "wrong elements" on stderr, and in the HDF5
# file status 'failed' with exactly one wrong element per measured point. A control run of
# the same command without the flag must pass, so the failure is the fault's doing.
source "$(dirname "$0")/lib.bash"

COLLS=(all_reduce all_gather reduce_scatter all_to_all broadcast sendrecv all_to_allv)

for c in "${COLLS[@]}"; do
  ARGS=(-n 2 -w 1 -b 64 -e 4K -f 8 -d int8,double -q)
  # all_to_allv: 8 B (int8) to 64 B (double) per token, at least 4 tokens so every rank receives.
  [[ $c == all_to_allv ]] && ARGS=(-n 2 -w 1 -b 256 -e 4K -f 4 -d int8,double -q --hidden 4)
  f="$WORK/$c-ok.h5"
  expect_rc 0 2 "${c}_bench" "${ARGS[@]}" -O "$f" || true
  for spec in "2 0" "2 1" "4 3"; do
    read -r n r <<< "$spec"
    f="$WORK/$c-$n-$r.h5"
    if expect_rc 1 "$n" "${c}_bench" "${ARGS[@]}" --inject-fault "$r" -O "$f"; then
      if ! grep -q "wrong elements" "$WORK/err"; then
        fail "$c -n $n --inject-fault $r: no 'wrong elements' message on stderr"; cat "$WORK/err" >&2
      else
        pass "$c -n $n --inject-fault $r: exit 1, 'wrong elements' on stderr"
        echo "fault $f $c" >> "$WORK/files"
      fi
    fi
  done
done
# The files, in one Python process (h5py's start is 0.2 s a file): status failed, 1 wrong per point.
batch_check "$WORK/files"

# A fault on a rank that does not exist is a usage error, not a silent pass.
expect_rc 2 2 all_reduce_bench -n 2 -w 1 -q --inject-fault 2 && pass "--inject-fault 2 at 2 ranks: exit 2"

finish
