#!/usr/bin/env bash
# mesh_info without MPI: its text output must match the golden files byte for byte (a diff is
# printed on a mismatch), a TP group that crosses emulated nodes must be warned about, the
# MESHBENCH_* environment must act like the flags, and --json must carry the same groups.
set -u
bin="${MB_BIN:?MB_BIN not set}/mesh_info"
golden="${MB_SRC:?MB_SRC not set}/tests/golden"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

check_golden() {  # NAME ARGS...: run mesh_info ARGS and diff against golden/NAME
  local name=$1; shift
  if ! "$bin" "$@" >"$tmp/$name" 2>"$tmp/$name.err"; then
    echo "FAIL [mesh_info_golden]: mesh_info $* exited non-zero:"; cat "$tmp/$name.err"; fail=1; return
  fi
  if ! diff -u "$golden/$name" "$tmp/$name"; then
    echo "FAIL [mesh_info_golden]: mesh_info $* differs from tests/golden/$name (diff above: - golden, + actual)"; fail=1
  fi
}

check_golden mesh_info_w16_tp2_pp2_dp4.txt --world 16 --mesh tp=2,pp=2,dp=4
check_golden mesh_info_w16_tp2_pp2_dp4_rpn4.txt --world 16 --mesh tp=2,pp=2,dp=4 --ranks-per-node 4

# The environment sets the same options.
if ! MESHBENCH_WORLD=16 MESHBENCH_MESH=tp=2,pp=2,dp=4 MESHBENCH_RANKS_PER_NODE=4 "$bin" >"$tmp/env.txt" ||
   ! diff -u "$golden/mesh_info_w16_tp2_pp2_dp4_rpn4.txt" "$tmp/env.txt"; then
  echo "FAIL [mesh_info_golden]: MESHBENCH_WORLD/MESH/RANKS_PER_NODE did not act like the flags"; fail=1
fi

# tp=4 on 2-rank nodes: every TP group crosses a node boundary.
out=$("$bin" --world 16 --mesh tp=4,pp=2 --ranks-per-node 2)
if ! grep -qx "warning: TP group spans 2 nodes (4 of 4 groups): .*" <<<"$out"; then
  echo "FAIL [mesh_info_golden]: no 'TP group spans 2 nodes' warning for tp=4 with 2 ranks per node:"; echo "$out" | tail -3; fail=1
fi
if "$bin" --world 16 --mesh tp=2,pp=2,dp=4 --ranks-per-node 4 | grep -q warning; then
  echo "FAIL [mesh_info_golden]: a warning for a layout whose TP groups stay inside nodes"; fail=1
fi

# --json: one object with the same groups as the table.
if ! "$bin" --world 16 --mesh tp=2,pp=2,dp=4 --ranks-per-node 4 --json >"$tmp/out.json"; then
  echo "FAIL [mesh_info_golden]: --json exited non-zero"; fail=1
elif ! "${MB_PYTHON:-python3}" - "$tmp/out.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["world"] == 16 and j["order"] == "tp-cp-ep-dp-pp", j
assert j["degrees"]["dp"] == 4 and j["degrees"]["edp"] == 4, j["degrees"]
assert [g["ranks"] for g in j["groups"]["dp"]] == [[0, 2, 4, 6], [1, 3, 5, 7], [8, 10, 12, 14], [9, 11, 13, 15]]
assert [g["span"] for g in j["groups"]["pp"]] == ["inter-node"] * 8
assert j["ranks"][13] == {"rank": 13, "tp": 1, "cp": 0, "ep": 0, "dp": 2, "pp": 1, "etp": 1, "edp": 2, "node": 3}
assert j["nodes"] == {"source": "emulated", "ranks_per_node": 4} and j["warnings"] == []
PY
then
  echo "FAIL [mesh_info_golden]: --json output is wrong"; fail=1
fi

[ $fail = 0 ] && echo "mesh_info golden: ok"
exit $fail
