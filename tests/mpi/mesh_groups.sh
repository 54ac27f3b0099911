#!/usr/bin/env bash
# Collectives inside mesh groups at 4 ranks: data verified per group (inputs depend on the
# members' world ranks, so a wrong grouping fails the check), node spans with emulated
# 2-rank nodes in the console and in HDF5, and impossible meshes refused with exit 2.
set -euo pipefail
: "${MB_BIN:?}" "${MB_PYTHON:=/usr/bin/python3}"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL [mesh_groups]: $*" >&2; exit 1; }
# 4 ranks on 2 cores: preload the yield shim when the test harness built one.
run4() { timeout 120 mpiexec -n 4 ${MB_UCX_YIELD:+-genv LD_PRELOAD "$MB_UCX_YIELD"} "$@"; }

for bin in all_reduce reduce_scatter all_gather all_to_all broadcast sendrecv all_to_allv; do
  extra=(); [[ $bin == all_to_allv ]] && extra=(--hidden 4 --routing hot-rank)  # 32 B per token
  for g in tp dp; do
    run4 "$MB_BIN/${bin}_bench" --mesh tp=2,dp=2 --group $g --ranks-per-node 2 -b 8 -e 4K -f 8 -n 2 -w 0 \
      "${extra[@]}" -O "$tmp/$bin-$g.h5" -q > "$tmp/out" || fail "$bin --group $g exited $?"
    grep -q "wrong elements: 0  status: ok" "$tmp/out" || fail "$bin --group $g: $(cat $tmp/out)"
  done
done

run4 "$MB_BIN/all_reduce_bench" --mesh tp=2,dp=2 --group tp --ranks-per-node 2 -b 8 -e 8 -n 2 -w 0 > "$tmp/tp.txt"
grep -q "group tp#0: ranks 0,1 (1 node, intra-node)" "$tmp/tp.txt" || fail "tp span in console: $(cat $tmp/tp.txt)"
run4 "$MB_BIN/all_reduce_bench" --mesh tp=2,dp=2 --group dp --ranks-per-node 2 -b 8 -e 8 -n 2 -w 0 > "$tmp/dp.txt"
grep -q "group dp#0: ranks 0,2 (2 nodes, inter-node)" "$tmp/dp.txt" || fail "dp span in console: $(cat $tmp/dp.txt)"

"$MB_PYTHON" - "$tmp/all_reduce-tp.h5" <<'PY'
import sys, h5py
f = h5py.File(sys.argv[1], "r")
(run,) = f["runs"].values()
assert run.attrs["group_dim"] == "tp", run.attrs["group_dim"]
assert run.attrs["nodes_emulated"] == 1 and run.attrs["nodes"] == 2
spans = {(g["dim"].decode(), g["ranks"].decode()): g["span"].decode() for g in run["topology/groups"][:]}
assert spans[("tp", "0,1")] == "intra" and spans[("tp", "2,3")] == "intra", spans
assert spans[("dp", "0,2")] == "inter" and spans[("dp", "1,3")] == "inter", spans
nodes = [int(r["node"]) for r in run["topology/ranks"][:]]
assert nodes == [0, 0, 1, 1], nodes
s = run["collectives/all_reduce/float-sum-out-of-place-tp"]
assert s.attrs["group_size"] == 2 and s.attrs["groups"] == 2
gm = s["group_t_median"][:]
assert gm.shape == (len(s["summary"]), 2), gm.shape
assert (gm > 0).all()
# The headline median is at least every group's median (slowest group decides).
for row, g in zip(s["summary"][:], gm):
    assert row["t_median"] >= g.max() * (1 - 1e-9) or abs(row["t_median"] - g.max()) < 1e-3, (row["t_median"], g)
print("hdf5 group spans ok")
PY

# Groups file: a custom pairing {0,3} {1,2}.
printf '# pairs\n0 3\n1,2\n' > "$tmp/pairs.txt"
run4 "$MB_BIN/all_reduce_bench" --groups-file "$tmp/pairs.txt" -b 8 -e 1K -f 8 -n 2 -w 0 -q > "$tmp/out" \
  || fail "groups file run exited $?"
grep -q "status: ok" "$tmp/out" || fail "groups file run: $(cat $tmp/out)"

# Impossible configurations: exit 2 on every rank, one message.
expect2() {
  local rc=0
  run4 "$MB_BIN/all_reduce_bench" "$@" -b 8 -e 8 -n 1 > "$tmp/o" 2> "$tmp/e" || rc=$?
  [ "$rc" = 2 ] || fail "expected exit 2 for $*, got $rc"
  [ "$(grep -c error "$tmp/e")" = 1 ] || fail "expected one error line for $*: $(cat $tmp/e)"
  grep -q -- "$want" "$tmp/e" || fail "message for $* lacks '$want': $(cat $tmp/e)"
}
want="divide" expect2 --mesh tp=3 --group tp
want="--mesh" expect2 --group tp
want="tq" expect2 --mesh tp=2 --group tq
printf '0 1 2\n3\n' > "$tmp/uneven.txt"
want="equal sizes" expect2 --groups-file "$tmp/uneven.txt"
printf '0 1\n' > "$tmp/partial.txt"
want="partial.txt" expect2 --groups-file "$tmp/partial.txt"
echo "mesh groups ok"
