#!/usr/bin/env bash
# Bad sweep files are refused before anything launches: unknown binary, a mesh that does not
# divide the ranks, an unknown fabric preset, an unknown key, rounds below 1, broken TOML.
# Each exits 2 with a message naming the entry, creates no output folder, and never calls the
# launcher (a stand-in mpiexec that leaves a marker). A good file with the same stand-in does
# call it (control).
. "$(dirname "$0")/lib.bash"
S="$MB_SRC/scripts/sweep"
cat > "$WORK/fake-mpiexec" <<SH
#!/bin/sh
echo "\$@" >> "$WORK/launched"
exit 0
SH
chmod +x "$WORK/fake-mpiexec"

refuse() {  # refuse NAME EXPECTED_MESSAGE_REGEX  (TOML on stdin)
  local name="$1" want="$2" rc=0
  cat > "$WORK/$name.toml"
  py "$S" "$WORK/$name.toml" --bin "$MB_BIN" --out "$WORK/out-$name" --mpiexec "$WORK/fake-mpiexec" \
    > "$WORK/$name.out" 2>&1 || rc=$?
  [[ $rc -eq 2 ]] || { cat "$WORK/$name.out"; fail "$name: exit $rc, expected 2"; }
  grep -qE "$want" "$WORK/$name.out" || fail "$name: message does not name the entry: $(cat "$WORK/$name.out")"
  [[ ! -e "$WORK/out-$name" ]] || fail "$name: output folder created"
  [[ ! -e "$WORK/launched" ]] || fail "$name: the launcher was called"
  pass "$name refused: $(head -1 "$WORK/$name.out")"
}

refuse unknown-binary "unknown binary 'allreduce'" <<'TOML'
binaries = ["all_reduce", "allreduce"]
TOML
refuse mesh-not-dividing "\[\[sweep\]\] #2: mesh 'tp=4' .*does not divide ranks=6" <<'TOML'
ranks = [6]
[[sweep]]
binaries = ["all_reduce"]
[[sweep]]
binaries = ["all_gather"]
meshes = [{ mesh = "tp=4", group = "tp" }]
TOML
refuse mesh-wrong-world "mesh 'tp=2,dp=2' needs 4 ranks, not ranks=2" <<'TOML'
ranks = [2]
meshes = ["tp=2,dp=2:tp"]
TOML
refuse unknown-fabric "unknown fabric preset 'infiniband'" <<'TOML'
fabrics = ["shm", "infiniband"]
TOML
refuse fabric-backend "fabric 'nccl-socket' is a nccl preset but backends = \['mpi'\]" <<'TOML'
fabrics = ["nccl-socket"]
TOML
# Inside a job of two nodes, a preset that reaches one node only cannot connect the ranks.
SLURM_JOB_NUM_NODES=2 refuse one-node-fabric "fabric 'shm' connects ranks on one node only, and this job has 2 nodes" <<'TOML'
fabrics = ["shm"]
TOML
refuse unknown-key "unknown key\(s\) \['rank'\]" <<'TOML'
rank = [2]
TOML
refuse bad-rounds "\[\[sweep\]\] #1: rounds must be a positive integer, got 0" <<'TOML'
[[sweep]]
binaries = ["all_reduce"]
rounds = 0
TOML
refuse bad-toml "not valid TOML" <<'TOML'
binaries = ["all_reduce"
TOML

# Control: a valid file reaches the launcher, so the checks above could have seen a launch.
cat > "$WORK/good.toml" <<'TOML'
binaries = ["all_reduce"]
max_bytes = "64"
TOML
py "$S" "$WORK/good.toml" --bin "$MB_BIN" --out "$WORK/out-good" --mpiexec "$WORK/fake-mpiexec" --no-report \
  > "$WORK/good.out" 2>&1 || true
grep -q "all_reduce_bench" "$WORK/launched" 2>/dev/null || fail "control: a good file did not reach the launcher"
pass "control: a valid file reaches the launcher"
