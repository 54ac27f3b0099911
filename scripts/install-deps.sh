#!/usr/bin/env bash
# Installs everything meshbench's build, tests and scripts need.
# Idempotent: on Debian/Ubuntu as root it installs only what is missing; elsewhere it
# prints what is missing and what to load instead, and exits 1 if the build cannot work.
#   scripts/install-deps.sh                (no arguments; `make deps` runs it)
set -euo pipefail
case "${1:-}" in
  -h | --help) sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "install-deps: takes no arguments, got '$1' (--help)" >&2; exit 2 ;;
esac

# The build, the tests, the analysis scripts, the PyTorch oracle and the Slurm/netns tests.
PKGS=(
  build-essential cmake ninja-build pkg-config git
  mpich libmpich-dev libhdf5-mpich-dev hdf5-tools
  libopenblas-dev libopenblas0-pthread libhwloc-dev
  libcli11-dev libfmt-dev nlohmann-json3-dev libtomlplusplus-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-h5py python3-numpy python3-matplotlib python3-pytest python3-torch
  slurm-wlm munge iproute2 procps
)

missing=()
if command -v dpkg-query >/dev/null 2>&1; then
  for p in "${PKGS[@]}"; do
    st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [[ "$st" == "install ok installed" ]] || missing+=("$p")
  done
else
  echo "install-deps: not a Debian/Ubuntu system; install the equivalents of:" >&2
  printf '  %s\n' "${PKGS[@]}" >&2
  echo "On a cluster: module load cmake mpi hdf5-parallel openblas hwloc (names vary by site)." >&2
  exit 0
fi

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#PKGS[@]} packages present"
  exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: missing packages (run as root, or ask your admin):" >&2
  echo "  apt-get install -y ${missing[*]}" >&2
  exit 1
fi

echo "install-deps: installing ${#missing[@]} packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# python3-h5py-mpi must never come in: it pulls OpenMPI next to MPICH.
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
