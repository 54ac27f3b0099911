# slurm/env.sh: the environment every meshbench sbatch template (and scripts/sweep) shares:
# module loads, paths, the launcher, and the named fabric presets.
# Source it; it defines functions and MB_* defaults and never launches anything itself.
# Not a configuration system: override any MB_* variable in the environment before sourcing
# (sbatch --export=ALL,MB_FABRIC=tcp ...) or edit the site block below.
#
#   MB_ROOT       source tree (default: the folder above this file)
#   MB_BIN        the binaries (default: $MB_ROOT/build/bin)
#   MB_RESULTS    results folder (default: $MB_ROOT/results/<job id or local-<time>>)
#   MB_LAUNCHER   srun (default inside a Slurm job) or mpiexec (default outside one)
#   MB_MODULES    modules to load when `module` exists (e.g. "mpich hdf5-mpich openblas")
#   MB_POINT_TIMEOUT  seconds after which one launch is killed (0 = no limit)
#
# Fabric presets (mb_fabric_list prints them): a name, the backend it applies to, the memory
# it uses, the launcher it needs, and the variables it sets. The binaries record every UCX_*,
# NCCL_*, MPIR_CVAR_* and FI_* variable in /runs/<id> attrs `env`, so a preset's variables
# always travel with its results; the preset's name travels as --tag.

# --- site block: what a cluster admin edits -------------------------------------------------
if [[ -n "${MB_MODULES:-}" ]] && command -v module >/dev/null 2>&1; then
  # shellcheck disable=SC2086
  module load ${MB_MODULES}
fi
# Devices the presets use when set; empty means "let UCX/NCCL choose" (the variable stays unset).
: "${MB_TCP_DEV:=}"          # e.g. eth0 (UCX_NET_DEVICES for tcp), NCCL_SOCKET_IFNAME for nccl-socket
: "${MB_IB_DEV:=}"           # e.g. mlx5_0:1 (UCX_NET_DEVICES for ib/roce)
: "${MB_IB_HCA:=}"           # e.g. mlx5_0,mlx5_1 (NCCL_IB_HCA)
: "${MB_ROCE_GID:=3}"        # RoCE v2 GID index (UCX_IB_GID_INDEX, NCCL_IB_GID_INDEX)
: "${MB_NETNS_DEV:=mbfab0}"  # the veth name inside both namespaces of scripts/netns-fabric

# --- paths ----------------------------------------------------------------------------------
MB_ROOT="${MB_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
MB_BIN="${MB_BIN:-$MB_ROOT/build/bin}"
if [[ -z "${MB_RESULTS:-}" ]]; then
  if [[ -n "${SLURM_JOB_ID:-}" ]]; then
    MB_RESULTS="$MB_ROOT/results/${SLURM_ARRAY_JOB_ID:-$SLURM_JOB_ID}"
  else
    MB_RESULTS="$MB_ROOT/results/local-$(date -u +%Y%m%dT%H%M%S)"
  fi
fi
if [[ -z "${MB_LAUNCHER:-}" ]]; then
  if [[ -n "${SLURM_JOB_ID:-}" ]]; then MB_LAUNCHER=srun; else MB_LAUNCHER=mpiexec; fi
fi
: "${MB_POINT_TIMEOUT:=0}"
export MB_ROOT MB_BIN MB_RESULTS MB_LAUNCHER MB_POINT_TIMEOUT

# --- fabric presets -------------------------------------------------------------------------
# name|backend|mem|launcher|VAR=value ...|description|reach
# backend: mpi or nccl (the --backend the preset is meant for); mem: --mem it implies;
# launcher: "default" (MB_LAUNCHER) or "netns" (scripts/netns-fabric, the emulated two nodes);
# reach: "node" when it only connects ranks on one node (shared memory, loopback), "nodes" when
# it also connects nodes (scripts/sweep refuses a "node" preset inside a multi-node job).
# A value that expands to empty leaves the variable unset, so UCX/NCCL pick their own default.
mb_fabric_table() {
  cat <<TABLE
shm|mpi|host|default|UCX_TLS=self,sm|MPICH/UCX shared memory (ranks on one node)|node
posix|mpi|host|default|UCX_TLS=self,posix|UCX POSIX shared memory only|node
sysv-cma|mpi|host|default|UCX_TLS=self,sysv,cma|UCX SysV shared memory + cross-memory attach|node
tcp|mpi|host|default|UCX_TLS=self,sm,tcp UCX_NET_DEVICES=${MB_TCP_DEV}|UCX TCP between nodes, shared memory within a node|nodes
tcp-only|mpi|host|default|UCX_TLS=self,tcp UCX_NET_DEVICES=${MB_TCP_DEV}|UCX TCP for every pair, even within a node|nodes
tcp-lo|mpi|host|default|UCX_TLS=self,tcp UCX_NET_DEVICES=lo|UCX TCP over loopback (one node; the local stand-in for Ethernet)|node
ib|mpi|host|default|UCX_TLS=self,sm,rc,ud UCX_NET_DEVICES=${MB_IB_DEV}|UCX InfiniBand verbs (RC + UD), shared memory within a node|nodes
ib-dc|mpi|host|default|UCX_TLS=self,sm,dc,ud UCX_NET_DEVICES=${MB_IB_DEV}|UCX InfiniBand dynamically connected transport (Mellanox/NVIDIA HCAs)|nodes
roce|mpi|host|default|UCX_TLS=self,sm,rc,ud UCX_NET_DEVICES=${MB_IB_DEV} UCX_IB_GID_INDEX=${MB_ROCE_GID}|UCX RoCE v2 (RC + UD over Ethernet)|nodes
netns|mpi|host|netns|UCX_TLS=self,tcp UCX_NET_DEVICES=${MB_NETNS_DEV}|emulated two nodes: 2 network namespaces, veth, tc tbf (scripts/netns-fabric)|nodes
nccl|nccl|device|default||NCCL defaults (NVLink/P2P, SHM, IB as NCCL detects)|nodes
nccl-nop2p|nccl|device|default|NCCL_P2P_DISABLE=1|NCCL without GPU peer-to-peer (through host shared memory)|nodes
nccl-noshm|nccl|device|default|NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1|NCCL without P2P and SHM (network even within a node)|nodes
nccl-ib|nccl|device|default|NCCL_IB_DISABLE=0 NCCL_NET=IB NCCL_IB_HCA=${MB_IB_HCA}|NCCL over InfiniBand verbs|nodes
nccl-roce|nccl|device|default|NCCL_IB_DISABLE=0 NCCL_NET=IB NCCL_IB_HCA=${MB_IB_HCA} NCCL_IB_GID_INDEX=${MB_ROCE_GID}|NCCL over RoCE v2|nodes
nccl-socket|nccl|device|default|NCCL_IB_DISABLE=1 NCCL_NET=Socket NCCL_SOCKET_IFNAME=${MB_TCP_DEV}|NCCL over TCP sockets (no RDMA)|nodes
TABLE
}

# Every variable any preset may set: cleared before a preset is applied so fabrics never leak
# into each other inside one job.
MB_FABRIC_VARS=(UCX_TLS UCX_NET_DEVICES UCX_IB_GID_INDEX NCCL_P2P_DISABLE NCCL_SHM_DISABLE
                NCCL_IB_DISABLE NCCL_NET NCCL_IB_HCA NCCL_IB_GID_INDEX NCCL_SOCKET_IFNAME)

# mb_fabric_list: one line per preset, fields separated by '|' (see the table above).
mb_fabric_list() { mb_fabric_table; }

# mb_fabric_field NAME N: field N (1-based) of preset NAME; returns 1 if NAME is unknown.
mb_fabric_field() {
  local line
  line=$(mb_fabric_table | awk -F'|' -v n="$1" '$1 == n')
  [[ -n "$line" ]] || return 1
  printf '%s\n' "$line" | cut -d'|' -f"$2"
}

# mb_fabric_env NAME: the VAR=value lines preset NAME sets (empty values dropped).
mb_fabric_env() {
  local vars v
  vars=$(mb_fabric_field "$1" 5) || { echo "env.sh: unknown fabric preset '$1' (known: $(mb_fabric_table | cut -d'|' -f1 | tr '\n' ' '))" >&2; return 2; }
  for v in $vars; do
    [[ -n "${v#*=}" ]] && printf '%s\n' "$v"
  done
  return 0
}

# mb_fabric_apply NAME: unset every preset variable, then export NAME's, and set MB_FABRIC,
# MB_FABRIC_BACKEND, MB_FABRIC_MEM, MB_FABRIC_LAUNCHER.
mb_fabric_apply() {
  local lines v
  lines=$(mb_fabric_env "$1") || return 2
  unset "${MB_FABRIC_VARS[@]}"
  while IFS= read -r v; do
    [[ -n "$v" ]] && export "${v?}"
  done <<< "$lines"
  MB_FABRIC="$1"
  MB_FABRIC_BACKEND=$(mb_fabric_field "$1" 2)
  MB_FABRIC_MEM=$(mb_fabric_field "$1" 3)
  MB_FABRIC_LAUNCHER=$(mb_fabric_field "$1" 4)
  export MB_FABRIC MB_FABRIC_BACKEND MB_FABRIC_MEM MB_FABRIC_LAUNCHER
}

# --- launcher -------------------------------------------------------------------------------
# mb_launch NTASKS CMD...: run CMD as one MPI job of NTASKS ranks with the chosen launcher.
# srun uses --mpi=pmi2 (pmix/none start N separate 1-rank jobs with Debian's MPICH). The netns
# preset goes through scripts/netns-fabric. MB_POINT_TIMEOUT > 0 wraps the launch in timeout(1)
# (MPICH can hang in MPI_Finalize over TCP at 3+ ranks); exit 124/137 then means "timed out".
mb_launch() {
  local n="$1"; shift
  local -a pre=()
  if [[ "${MB_POINT_TIMEOUT:-0}" != 0 ]]; then
    pre=(timeout --kill-after=15 "$MB_POINT_TIMEOUT")
  fi
  local launcher="${MB_LAUNCHER}"
  [[ "${MB_FABRIC_LAUNCHER:-default}" == netns ]] && launcher=netns
  case "$launcher" in
    srun)    "${pre[@]}" srun --mpi=pmi2 --ntasks="$n" --kill-on-bad-exit=1 ${MB_SRUN_ARGS:-} "$@" ;;
    mpiexec) "${pre[@]}" mpiexec -n "$n" ${MB_MPIEXEC_ARGS:-} "$@" ;;
    netns)   "${pre[@]}" "$MB_ROOT/scripts/netns-fabric" exec -n "$n" -- "$@" ;;
    *) echo "env.sh: MB_LAUNCHER must be srun or mpiexec, got '$launcher'" >&2; return 2 ;;
  esac
}

# mb_note MSG: a timestamped line on stderr (job logs read in order with the binaries' output).
mb_note() { printf '[meshbench %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# --- the collective loop both sbatch templates run --------------------------------------------
# Sizes and loop settings (the binaries' -b -e -f -n -w -c); MB_ARGS adds flags to every run
# (e.g. "--mesh tp=2,dp=2 --group tp" or "-d bf16 --inplace both").
: "${MB_BINARIES:=}"  # empty: every collective the build has (mesh_info --list-json)
: "${MB_MIN_BYTES:=8}"
: "${MB_MAX_BYTES:=128M}"
: "${MB_STEP_FACTOR:=2}"
# MB_ITERS / MB_WARMUP unset: the binaries' adaptive defaults (warm-up until stable, at least
# 20 iterations and 0.1 s per size); set, they are passed as -n / -w and mean exactly that.
: "${MB_ITERS:=}"
: "${MB_WARMUP:=}"
: "${MB_CHECK:=1}"
: "${MB_ARGS:=}"

# mb_run_collectives NTASKS TAG OUTDIR: every binary of MB_BINARIES once, results in
# OUTDIR/<name>.h5 (appended to when the file exists, e.g. after a requeue), the current
# fabric's backend and memory. Prints one line per binary; returns the worst exit code
# (0 ok, 1 wrong data, 2 bad usage, 3 runtime fault, 124/137 timeout).
# mb_collectives: the collectives this build has, from the binaries themselves.
mb_collectives() {
  "$MB_BIN/mesh_info" --list-json | sed -n 's/.*"collectives":\[\([^]]*\)\].*/\1/p' | tr -d '"' | tr ',' ' '
}

mb_run_collectives() {
  local n="$1" tag="$2" out="$3" worst=0 rc b exe list="$MB_BINARIES"
  local backend="${MB_BACKEND:-${MB_FABRIC_BACKEND:-mpi}}" mem="${MB_MEM:-${MB_FABRIC_MEM:-host}}"
  mkdir -p "$out"
  if [[ -z "$list" ]]; then
    [[ -x "$MB_BIN/mesh_info" ]] || { mb_note "$MB_BIN/mesh_info missing (build with make, or set MB_BIN)"; return 2; }
    list=$(mb_collectives)
  fi
  for b in $list; do
    b="${b%_bench}"
    exe="$MB_BIN/${b}_bench"
    if [[ ! -x "$exe" ]]; then
      mb_note "$exe missing (build with make, or set MB_BIN)"; worst=2; continue
    fi
    local -a app=() loop=()
    [[ -e "$out/$b.h5" ]] && app=(--append)
    [[ -n "$MB_ITERS" ]] && loop+=(-n "$MB_ITERS")
    [[ -n "$MB_WARMUP" ]] && loop+=(-w "$MB_WARMUP")
    mb_note "$b: $n ranks, fabric '$tag' ($(mb_fabric_env "${MB_FABRIC:-}" 2>/dev/null | tr '\n' ' ')), backend $backend, $MB_MIN_BYTES..$MB_MAX_BYTES"
    rc=0
    # shellcheck disable=SC2086
    mb_launch "$n" "$exe" -b "$MB_MIN_BYTES" -e "$MB_MAX_BYTES" -f "$MB_STEP_FACTOR" \
      "${loop[@]}" -c "$MB_CHECK" --backend "$backend" --mem "$mem" \
      --tag "$tag" -O "$out/$b.h5" "${app[@]}" $MB_ARGS || rc=$?
    mb_note "$b: exit $rc"
    printf '%s\t%s\t%s\t%s\n' "$tag" "$b" "$rc" "$out/$b.h5" >> "$out/exit-codes.tsv"
    (( rc > worst )) && worst=$rc
  done
  return "$worst"
}

# mb_report DIR [report args...]: DIR/report.md and DIR/plots/ (MB_PLOTS=0: no plots) when
# Python with h5py and matplotlib is there.
mb_report() {
  local dir="$1"; shift
  local py="${MB_PYTHON:-/usr/bin/python3}"
  if ! "$py" -c 'import h5py, matplotlib' 2>/dev/null; then
    mb_note "no h5py/matplotlib for $py: skipping report (run scripts/report $dir later)"; return 0
  fi
  "$py" "$MB_ROOT/scripts/report" "$dir" "$@" -o "$dir/report.md" && mb_note "report: $dir/report.md"
  if [[ "${MB_PLOTS:-1}" != 0 ]]; then
    "$py" "$MB_ROOT/scripts/plot" "$dir" -o "$dir/plots" --heatmaps 6 >/dev/null && mb_note "plots: $dir/plots/"
  fi
  return 0
}
