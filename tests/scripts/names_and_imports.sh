#!/usr/bin/env bash
# The scripts as a user runs them: a sweep whose --bin lacks mesh_info exits 2 naming it, an
# unknown binary is refused with mesh_info's own list, and report/plot/sweep/calibrate import
# scripts/meshbench from any working directory. (The package's unit tests are tests/python:
# ctest python.<module>.)
. "$(dirname "$0")/lib.bash"

# The names come from the binary: a folder without mesh_info is refused before anything runs.
mkdir -p "$WORK/nobin"
printf 'binaries = ["all_reduce"]\n' > "$WORK/s.toml"
rc=0; py "$MB_SRC/scripts/sweep" "$WORK/s.toml" --bin "$WORK/nobin" --out "$WORK/out" --dry-run > "$WORK/err" 2>&1 || rc=$?
[[ $rc -eq 2 ]] && grep -q "nobin/mesh_info is missing" "$WORK/err" || fail "sweep without mesh_info: exit $rc, $(cat "$WORK/err")"
[[ ! -e "$WORK/out" ]] || fail "sweep without mesh_info created its output folder"
pass "sweep without mesh_info exits 2 naming it"
# With the real binaries, an unknown binary is refused with the list mesh_info gives.
printf 'binaries = ["all_reduce", "bogus"]\n' > "$WORK/b.toml"
rc=0; py "$MB_SRC/scripts/sweep" "$WORK/b.toml" --bin "$MB_BIN" --dry-run > "$WORK/err" 2>&1 || rc=$?
want=$("$MB_BIN/mesh_info" --list-json | py -c 'import json,sys; print(", ".join(b for b in json.load(sys.stdin)["binaries"] if b.endswith("_bench")))')
[[ $rc -eq 2 ]] && grep -qF "unknown binary 'bogus' (known: $want)" "$WORK/err" || fail "unknown binary: exit $rc, $(cat "$WORK/err")"
pass "unknown binary refused with mesh_info's list"

# Imports work from any working directory (the scripts put scripts/ on sys.path themselves).
cd /
for s in report plot sweep calibrate; do
  py "$MB_SRC/scripts/$s" --help > /dev/null || fail "$s --help from / failed"
done
py "$MB_SRC/scripts/torch_step_bench.py" --help > /dev/null || fail "torch_step_bench.py --help from / failed"
pass "report, plot, sweep, calibrate, torch_step_bench.py import scripts/meshbench from /"
