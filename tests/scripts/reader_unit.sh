#!/usr/bin/env bash
# scripts/meshbench on small files written here (reader_unit.py: collective and step tables equal
# the values written, unreadable files listed, filters over both tables, names equal to
# `mesh_info --list-json`), and the names' failure mode: a sweep whose --bin lacks mesh_info exits
# 2 naming it, and report/plot/sweep import the package from any working directory.
. "$(dirname "$0")/lib.bash"
py "$MB_SRC/tests/scripts/reader_unit.py" "$MB_SRC" "$MB_BIN" "$WORK" > "$WORK/unit.log" 2>&1 \
  || { cat "$WORK/unit.log"; fail "reader unit tests"; }
pass "reader unit tests: $(grep -c ' ok$' "$WORK/unit.log") ok"

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
for s in report plot sweep; do
  py "$MB_SRC/scripts/$s" --help > /dev/null || fail "$s --help from / failed"
done
py "$MB_SRC/scripts/torch_step_bench.py" --help > /dev/null || fail "torch_step_bench.py --help from / failed"
pass "report, plot, sweep, torch_step_bench.py import scripts/meshbench from /"
