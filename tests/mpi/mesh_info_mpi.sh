#!/usr/bin/env bash
# mesh_info under mpiexec -n 4: the world size comes from MPI, rank 0 alone prints, nodes come
# from the hosts (one here), and --ranks-per-node 2 makes TP groups intra-node and DP groups
# inter-node for the default order.
set -u
bin="${MB_BIN:?MB_BIN not set}/mesh_info"
mpiexec="${MB_MPIEXEC:-mpiexec}"
fail=0

out=$(timeout 60 "$mpiexec" -n 4 "$bin" --mesh tp=2) || { echo "FAIL [mesh_info_mpi]: mpiexec -n 4 mesh_info exited $?"; exit 1; }
[ "$(grep -c '^mesh_info: 4 ranks' <<<"$out")" = 1 ] || { echo "FAIL [mesh_info_mpi]: header not printed exactly once:"; echo "$out" | head; fail=1; }
grep -qx 'nodes: 1, from the hosts' <<<"$out" || { echo "FAIL [mesh_info_mpi]: want 'nodes: 1, from the hosts'"; fail=1; }

out=$(timeout 60 "$mpiexec" -n 4 "$bin" --mesh tp=2 --ranks-per-node 2) || { echo "FAIL [mesh_info_mpi]: exit $?"; exit 1; }
want_tp=$'tp: 2 groups of 2\n     0  [0, 1]  1 node, intra-node\n     1  [2, 3]  1 node, intra-node'
want_dp=$'dp: 2 groups of 2\n     0  [0, 2]  2 nodes, inter-node\n     1  [1, 3]  2 nodes, inter-node'
grep -qx 'nodes: 2, emulated with 2 ranks per node' <<<"$out" || { echo "FAIL [mesh_info_mpi]: emulated nodes not labelled"; fail=1; }
[[ "$out" == *"$want_tp"* ]] || { echo "FAIL [mesh_info_mpi]: TP groups not intra-node:"; echo "$out" | grep -A2 '^tp:'; fail=1; }
[[ "$out" == *"$want_dp"* ]] || { echo "FAIL [mesh_info_mpi]: DP groups not inter-node:"; echo "$out" | grep -A2 '^dp:'; fail=1; }

[ $fail = 0 ] && echo "mesh_info under mpiexec: ok"
exit $fail
