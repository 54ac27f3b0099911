#!/usr/bin/env bash
# `scripts/sweep --dry-run` prints commands that run as pasted: the launcher with the point's
# ranks (mpiexec -n N, or scripts/netns-fabric exec -n N for the netns preset), the fabric
# preset's variables (and `env -u` for preset variables of the calling shell the point must not
# see) and the binary with its flags. Each printed command is run in a shell here and the file
# it writes must hold a run of the point's world size, tag and transport; the sweep then counts
# that file as the point's round 1.
. "$(dirname "$0")/lib.bash"
S="$MB_SRC/scripts/sweep"
T="$MB_SRC/tests/scripts/h5truth.py"

# cmd_of FILE ID: the command the dry run printed for point ID.
cmd_of() { sed -n "s/^\[[0-9]*\/[0-9]*\] $2 ([^)]*): //p" "$1"; }
# pasted LOG CMD: run CMD in a shell (120 s limit). A run whose binary wrote its results and then
# gave up on a hung MPI_Finalize (MPICH 4.0 over TCP; the binary says so and exits 0, hydra may
# still exit non-zero) counts as run: that bug is not what this test checks.
pasted() {
  local rc=0
  timeout 120 bash -c "$2" > "$1" 2>&1 || rc=$?
  if [[ $rc -ne 0 ]] && grep -q 'MPI_Finalize did not return within .* results are complete' "$1"; then
    echo "note [$TEST_NAME]: exit $rc after a hung MPI_Finalize (results complete): counted as run" >&2
    rc=0
  fi
  return $rc
}
world_of() { py -c 'import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    print(*[int(r.attrs["world_size"]) for r in f["runs"].values()])' "$1"; }

# 1. A step point on shm. The calling shell has a preset variable the point must not see
# (UCX_NET_DEVICES, set by tcp presets): the printed command unsets it.
cat > "$WORK/s.toml" <<TOML
name = "dry-test"
ranks = [2]
fabrics = ["shm"]
args = ["--steps", "1", "--warmup", "0", "--threads", "1"]
[steps]
model = "tiny"
tp = [1]
pp = [1]
zero = [0]
TOML
ID=step-r2-mpi-shm-tp1cp1ep1dp2pp1-z0-m1-otcedp
UCX_NET_DEVICES=no-such-dev py "$S" "$WORK/s.toml" --bin "$MB_BIN" --out "$WORK/out" --mpiexec "$MB_MPIEXEC" --dry-run \
  > "$WORK/dry1" 2>&1 || { cat "$WORK/dry1"; fail "dry run exit $?"; }
cmd=$(cmd_of "$WORK/dry1" "$ID")
[[ -n "$cmd" ]] || { cat "$WORK/dry1"; fail "no command printed for $ID"; }
[[ "$cmd" == "env -u UCX_NET_DEVICES UCX_TLS=self,sm MB_FABRIC=shm $MB_MPIEXEC -n 2 $MB_BIN/step_bench "* ]] \
  || fail "the command lacks env -u, the preset or 'mpiexec -n 2': $cmd"
[[ ! -e "$WORK/out" ]] || fail "the dry run created the output folder"
rc=0
UCX_NET_DEVICES=no-such-dev pasted "$WORK/run1.log" "$cmd" || rc=$?
[[ $rc -eq 0 ]] || { cat "$WORK/run1.log"; fail "the pasted step command exited $rc"; }
f="$WORK/out/$ID.h5"
py "$T" status "$f" ok > /dev/null || fail "$f: status $(py "$T" status "$f")"
[[ "$(world_of "$f")" == 2 ]] || fail "$f: world size $(world_of "$f"), want 2 (the command ran $(world_of "$f") rank(s))"
[[ $(py "$T" attr "$f" tag) == shm ]] || fail "$f: tag $(py "$T" attr "$f" tag), want shm"
env_rec=$(py "$T" attr "$f" env)
grep -q '"UCX_TLS": *"self,sm"' <<< "$env_rec" || fail "the preset is not in the run's env: $env_rec"
! grep -q 'UCX_NET_DEVICES' <<< "$env_rec" || fail "the run saw UCX_NET_DEVICES: $env_rec"
# The sweep counts the pasted run as round 1 and prints round 2's command next.
py "$S" "$WORK/s.toml" --bin "$MB_BIN" --out "$WORK/out" --mpiexec "$MB_MPIEXEC" --dry-run > "$WORK/dry2" 2>&1 \
  || { cat "$WORK/dry2"; fail "second dry run exit $?"; }
grep -q "^\[1/1\] $ID (1 of 3 rounds ok): .* -O $WORK/out/$ID.r2.h5 " "$WORK/dry2" || { cat "$WORK/dry2"; fail "round 2's command not printed next"; }
pass "step point: the pasted command ran 2 ranks on shm (preset applied, UCX_NET_DEVICES unset), counted as round 1"

# MESHBENCH_* variables of the calling shell reach every point (the binaries read options from
# them): the sweep names them.
MESHBENCH_STEP_SEED=7 py "$S" "$WORK/s.toml" --bin "$MB_BIN" --out "$WORK/out" --dry-run > "$WORK/dry3" 2>&1 \
  || { cat "$WORK/dry3"; fail "dry run with MESHBENCH_STEP_SEED exit $?"; }
grep -q '^sweep: note: MESHBENCH_STEP_SEED=7 set here: every point' "$WORK/dry3" || { cat "$WORK/dry3"; fail "MESHBENCH_STEP_SEED not named"; }
pass "a MESHBENCH_* variable of the calling shell is named"

# 2. A collective point on tcp-lo: the preset's two variables, 2 ranks.
printf 'binaries = ["all_reduce"]\nfabrics = ["tcp-lo"]\nmax_bytes = "64"\niters = 2\nwarmup = 1\n' > "$WORK/c.toml"
py "$S" "$WORK/c.toml" --bin "$MB_BIN" --out "$WORK/cout" --mpiexec "$MB_MPIEXEC" --dry-run > "$WORK/cdry" 2>&1 \
  || { cat "$WORK/cdry"; fail "collective dry run exit $?"; }
cmd=$(cmd_of "$WORK/cdry" all_reduce-r2-mpi-tcp-lo)
[[ "$cmd" == *"UCX_TLS=self,tcp UCX_NET_DEVICES=lo MB_FABRIC=tcp-lo $MB_MPIEXEC -n 2 "* ]] || fail "collective command: $cmd"
rc=0
pasted "$WORK/run2.log" "$cmd" || rc=$?
[[ $rc -eq 0 ]] || { cat "$WORK/run2.log"; fail "the pasted collective command exited $rc"; }
f="$WORK/cout/all_reduce-r2-mpi-tcp-lo.h5"
py "$T" status "$f" ok > /dev/null || fail "$f: status $(py "$T" status "$f")"
[[ "$(world_of "$f")" == 2 ]] || fail "$f: world size $(world_of "$f"), want 2"
grep -q '"UCX_NET_DEVICES": *"lo"' <<< "$(py "$T" attr "$f" env)" || fail "tcp-lo preset not in the run's env"
pass "collective point: the pasted command ran 2 ranks over tcp-lo"

# 3. The netns preset: the command goes through scripts/netns-fabric exec -n 2 (two emulated
# nodes). Needs root and network namespaces; skipped otherwise.
if "$MB_SRC/scripts/netns-fabric" check >/dev/null 2>&1; then
  printf 'binaries = ["all_reduce"]\nfabrics = ["netns"]\nmax_bytes = "64"\niters = 2\nwarmup = 1\n' > "$WORK/n.toml"
  py "$S" "$WORK/n.toml" --bin "$MB_BIN" --out "$WORK/nout" --mpiexec "$MB_MPIEXEC" --dry-run > "$WORK/ndry" 2>&1 \
    || { cat "$WORK/ndry"; fail "netns dry run exit $?"; }
  cmd=$(cmd_of "$WORK/ndry" all_reduce-r2-mpi-netns)
  [[ "$cmd" == *"MB_FABRIC=netns $MB_SRC/scripts/netns-fabric exec -n 2 -- $MB_BIN/all_reduce_bench "* ]] || fail "netns command: $cmd"
  rc=0
  pasted "$WORK/run3.log" "$cmd" || rc=$?
  "$MB_SRC/scripts/netns-fabric" down --auto 2>/dev/null || true
  [[ $rc -eq 0 ]] || { cat "$WORK/run3.log"; fail "the pasted netns command exited $rc"; }
  f="$WORK/nout/all_reduce-r2-mpi-netns.h5"
  py "$T" status "$f" ok > /dev/null || fail "$f: status $(py "$T" status "$f")"
  [[ "$(world_of "$f")" == 2 ]] || fail "$f: world size $(world_of "$f"), want 2"
  [[ $(py "$T" attr "$f" nodes) == 2 ]] || fail "$f: nodes $(py "$T" attr "$f" nodes), want 2 (the two namespaces)"
  pass "netns point: the pasted command ran 2 ranks on 2 emulated nodes"
else
  echo "note [$TEST_NAME]: netns fabric unusable here ($("$MB_SRC/scripts/netns-fabric" check 2>&1 | tail -1)): its part skipped"
fi
