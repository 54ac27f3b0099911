#!/usr/bin/env bash
# The tensor-, context- and pipeline-parallel step benchmarks of docs/measurements.md, one after the
# other in one run (1 thread per rank, OPENBLAS_CORETYPE=Haswell): tp=1 against tp=2 (AR,
# SP, overlap off) on the medium shape, cp=1 against cp=2 (ring, allgather, ulysses,
# contiguous, overlap off) on a 2048-token shape, pp=2 GPipe/1F1B at m = 2, 4, 8 and
# interleaved. HDF5 files go to $OUT (default /tmp/bench); read them with scripts/report.
# Run on an otherwise idle machine (it prints uptime before and after each group).
#   scripts/bench-strategies.sh            (no arguments; OUT=/tmp/bench BUILD=build)
set -u
case "${1:-}" in
  -h | --help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "bench-strategies: takes no arguments, got '$1' (OUT=DIR and BUILD=DIR set where it writes and reads; --help)" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/../${BUILD:-build}"
export OPENBLAS_CORETYPE=Haswell OMP_NUM_THREADS=1
D=${OUT:-/tmp/bench}; mkdir -p "$D/tp" "$D/cp" "$D/pp"; rm -f "$D"/tp/*.h5 "$D"/cp/*.h5 "$D"/pp/*.h5
uptime
M="--model medium --steps 5 --warmup 1 --threads 1 --quiet"
run() { local n=$1 out=$2; shift 2; echo "== n=$n $*"; mpiexec -n $n bin/step_bench "$@" -O $out 2>&1 | tail -1; }
run 1 $D/tp/tp1.h5 $M
run 2 $D/tp/tp2.h5 $M --mesh tp=2
run 2 $D/tp/tp2sp.h5 $M --mesh tp=2 --sp
run 2 $D/tp/tp2no.h5 $M --mesh tp=2 --no-overlap
run 2 $D/tp/tp2spno.h5 $M --mesh tp=2 --sp --no-overlap
run 1 $D/tp/tp1b.h5 $M
uptime
L="--layers 2 --hidden 256 --heads 4 --seq 2048 --max-seq 2048 --vocab 1024 --micro-batch 1 --steps 4 --warmup 1 --threads 1 --quiet --profile"
run 1 $D/cp/cp1.h5 $L
run 2 $D/cp/ring.h5 $L --mesh cp=2
run 2 $D/cp/ringno.h5 $L --mesh cp=2 --no-overlap
run 2 $D/cp/allgather.h5 $L --mesh cp=2 --cp-algo allgather
run 2 $D/cp/ulysses.h5 $L --mesh cp=2 --cp-algo ulysses
run 2 $D/cp/contig.h5 $L --mesh cp=2 --cp-split contiguous
uptime
P="--model medium --mesh pp=2 --threads 1 --steps 2 --warmup 1 --quiet"
for m in 2 4 8; do for s in gpipe 1f1b; do run 2 $D/pp/${s}_m$m.h5 $P --schedule $s --micro-batches $m; done; done
run 2 $D/pp/interleaved_m8.h5 $P --schedule interleaved --vpp 2 --micro-batches 8
uptime
