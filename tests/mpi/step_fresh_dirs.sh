#!/usr/bin/env bash
# Issue 23: "-O folder creation races between ranks". Twenty back-to-back 2-rank step_bench
# runs (tiny model, 1 step), each into a fresh, not yet existing folder two levels deep
# (-O $WORK/zN/sub/z.h5), must all exit 0 and each leave one finished run in its file: the
# folder is made once, by the writer, before any rank needs it.
. "$(dirname "$0")/lib.bash"

N=20
bad=0
for i in $(seq 1 "$N"); do
  f="$WORK/z$i/sub/z.h5"
  rc=0
  mpirun 2 step_bench --model tiny --steps 1 --warmup 0 --threads 1 --mesh dp=2 -O "$f" || rc=$?
  if [[ $rc -ne 0 ]]; then
    fail "run $i of $N into a fresh folder exited $rc"
    tail -5 "$WORK/err" >&2 || true
    bad=$((bad + 1))
    continue
  fi
  st=$(py -c 'import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    print(",".join(r.attrs["status"].decode() if isinstance(r.attrs["status"], bytes) else str(r.attrs["status"])
                   for r in f["runs"].values()))' "$f" 2>&1) || st="unreadable: $st"
  if [[ "$st" != ok ]]; then
    fail "run $i: $f holds status '$st', want one run ok"
    bad=$((bad + 1))
  fi
done
[[ $bad -eq 0 ]] && pass "$N of $N back-to-back 2-rank runs into fresh folders exited 0 with one ok run each"
finish
