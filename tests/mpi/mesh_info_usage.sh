#!/usr/bin/env bash
# mesh_info refuses bad input with exit code 2 and exactly one stderr line naming the rule,
# printed once even under mpiexec (every rank refuses; none hangs).
set -u
bin="${MB_BIN:?MB_BIN not set}/mesh_info"
mpiexec="${MB_MPIEXEC:-mpiexec}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

expect_usage() {  # PATTERN CMD...: CMD must exit 2, print nothing on stdout, one stderr line matching PATTERN
  local pattern=$1; shift
  timeout 60 "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  local lines; lines=$(grep -c . "$tmp/err")
  if [ $rc -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -q -- "$pattern" "$tmp/err" || [ -s "$tmp/out" ]; then
    echo "FAIL [mesh_info_usage]: $* -> rc=$rc (want 2), $lines stderr lines (want 1 matching '$pattern'):"
    cat "$tmp/err"; head -3 "$tmp/out"; fail=1
  fi
}

expect_usage "tp\*cp\*pp = 2\*1\*3 = 6 does not divide the world size" "$bin" --world 16 --mesh tp=2,pp=3
expect_usage "tp\*cp\*dp\*pp must equal the world size" "$bin" --world 16 --mesh tp=2,pp=2,dp=2
expect_usage "unknown dimension 'xp'" "$bin" --world 16 --mesh tp=2,xp=2
expect_usage "--order 'tp-dp-xp': unknown dimension 'xp'" "$bin" --world 16 --order tp-dp-xp
expect_usage "dimension dp appears twice" "$bin" --world 16 --order tp-dp-dp
expect_usage "ep must divide dp\*cp" "$bin" --world 16 --mesh tp=2,pp=2,ep=3
expect_usage "degree of tp must be >= 1" "$bin" --world 16 --mesh tp=0
expect_usage "--world must be >= 1" "$bin" --world 0
expect_usage "--ranks-per-node must be >= 1" "$bin" --world 8 --ranks-per-node 0
expect_usage "not expected: --bogus" "$bin" --world 8 --bogus
expect_usage "unknown dimension 'xp'" env MESHBENCH_MESH=xp=2 "$bin" --world 8
# Under mpiexec every rank validates; rank 0 alone prints.
expect_usage "tp\*cp\*pp = 3\*1\*1 = 3 does not divide the world size" "$mpiexec" -n 4 "$bin" --mesh tp=3

[ $fail = 0 ] && echo "mesh_info usage errors: ok"
exit $fail
