# tests/mpi/compose_lib.bash: the composed-plan tests' shared run (sourced after lib.bash by
# step_compose*.sh; not a test itself). compose_case LABEL RANKS DIMS [--group DIM=RANKS]... --
# STEP_BENCH_ARGS...: one --check run of the plan written to HDF5, then compose_check.py: check
# pass, every dimension in DIMS traced with bytes equal to the plan's, nothing else traced.
compose_n=0
compose_case() {
  local label=$1 n=$2 dims=$3; shift 3
  local -a groups=()
  while [[ $1 != -- ]]; do groups+=("$1"); shift; done
  shift
  compose_n=$((compose_n + 1))
  local h5="$WORK/c$compose_n.h5"
  if expect_rc 0 "$n" step_bench "$@" -O "$h5"; then
    if py "$MB_SRC/tests/mpi/compose_check.py" "$h5" "$WORK/out" "$dims" "${groups[@]}" > "$WORK/check" 2>&1; then
      pass "$label: $(cat "$WORK/check")"
    else
      fail "$label: $(cat "$WORK/check")"
    fi
  fi
}
