#!/usr/bin/env bash
# Bad invocations are refused on every rank: at 2 ranks (and 4 for the rules that read the rank
# count) each one must make every rank exit 2 (recorded per rank by a wrapper, keyed by PMI_RANK) within a timeout, print exactly
# one line on stderr that names the option, and nothing on stdout. Controls show that the
# same commands with the offending value fixed run (exit 0), so a refusal is not an accident.
source "$(dirname "$0")/lib.bash"

# Runs the real command and records its exit code per rank.
cat > "$WORK/wrap.sh" <<'EOF'
#!/usr/bin/env bash
"$@"
rc=$?
echo "$rc" > "$MB_RCDIR/rank.${PMI_RANK:-unknown}"
exit $rc
EOF
chmod +x "$WORK/wrap.sh"
export MB_RCDIR="$WORK/rc"
mkdir -p "$MB_RCDIR"
touch "$WORK/existing.h5"
sum0=$(md5sum < "$WORK/existing.h5")

# expect_usage N PATTERN [VAR=VALUE...] BINARY ARGS...  (PATTERN: a fixed string)
expect_usage() {
  local n=$1 pattern=$2; shift 2
  local -a envs=()
  while [[ $1 == *=* ]]; do envs+=("$1"); shift; done
  local exe="$MB_BIN/$1"; shift
  local -a pre=()
  if [[ -n "$MB_UCX_YIELD" && $n -gt $CORES ]]; then pre=(-genv LD_PRELOAD "$MB_UCX_YIELD"); fi
  rm -f "$MB_RCDIR"/rank.*
  local rc=0 t0=$SECONDS
  env "${envs[@]}" timeout --kill-after=5 60 "$MB_MPIEXEC" "${pre[@]}" -n "$n" "$WORK/wrap.sh" "$exe" "$@" \
    > "$WORK/out" 2> "$WORK/err" || rc=$?
  local what="${envs[*]} -n $n $(basename "$exe") $*"
  local lines ranks codes
  lines=$(grep -c . "$WORK/err" || true)
  ranks=$(ls "$MB_RCDIR" | wc -l)
  codes=$(cat "$MB_RCDIR"/rank.* 2>/dev/null | sort -u | tr '\n' ' ')
  if [[ $rc -eq 124 || $rc -eq 137 ]]; then
    fail "$what: timed out (a rank hung)"
  elif [[ $rc -ne 2 ]]; then
    fail "$what: mpiexec exit $rc, want 2"
  elif [[ $ranks -ne $n || "$codes" != "2 " ]]; then
    fail "$what: $ranks of $n ranks recorded exit codes '$codes', want 2 on every rank"
  elif [[ $lines -ne 1 ]]; then
    fail "$what: $lines stderr lines, want exactly 1"
  elif ! grep -qF -e "$pattern" "$WORK/err"; then
    fail "$what: stderr does not name '$pattern'"
  elif [[ -s "$WORK/out" ]]; then
    fail "$what: printed on stdout"
  else
    pass "$what -> 2 on $n ranks in $((SECONDS - t0))s: $(cut -c1-110 "$WORK/err")"
    return 0
  fi
  sed 's/^/    stderr: /' "$WORK/err" | head -5 >&2
  head -3 "$WORK/out" | sed 's/^/    stdout: /' >&2
}

Q=(-n 1 -w 0 -q)
# Every rule at 2 ranks; at 4 (oversubscribed) the rules that read the rank count, the one
# rank 0 decides alone (an existing -O file) and one parse error: the other refusals are
# decided from the options on every rank alike, before any rank communicates.
for n in 2 4; do
  expect_usage $n "-d/--dtype: unknown type 'float128'" all_reduce_bench "${Q[@]}" -d float128
  expect_usage $n "-r/--root $n" broadcast_bench "${Q[@]}" --root $n
  expect_usage $n "--inject-fault $n" sendrecv_bench "${Q[@]}" --inject-fault $n
  expect_usage $n "-O/--output $WORK/existing.h5" all_to_all_bench "${Q[@]}" -O "$WORK/existing.h5"
done
n=2
expect_usage $n "-d/--dtype: unknown type 'bogus'" MESHBENCH_DTYPE=bogus all_reduce_bench "${Q[@]}"
expect_usage $n "-b/--min-bytes (1M) must not exceed -e/--max-bytes (64K)" all_reduce_bench "${Q[@]}" -b 1M -e 64K
expect_usage $n "-b/--min-bytes" all_reduce_bench "${Q[@]}" -b 12Q
expect_usage $n "-f/--step-factor" all_reduce_bench "${Q[@]}" -f 1
expect_usage $n "-n/--iters" all_reduce_bench -n 0
expect_usage $n "--append needs -O/--output" all_reduce_bench "${Q[@]}" --append
expect_usage $n "--backend: unknown backend 'gloo'" all_reduce_bench "${Q[@]}" --backend gloo
expect_usage $n "--backend nccl" all_reduce_bench "${Q[@]}" --backend nccl
expect_usage $n "--mem host" all_reduce_bench "${Q[@]}" --backend nccl --mem host
expect_usage $n "op avg" all_reduce_bench "${Q[@]}" -o avg
expect_usage $n "op avg" reduce_scatter_bench "${Q[@]}" -o sum,avg
expect_usage $n "dtype half" all_reduce_bench "${Q[@]}" -d half
expect_usage $n "dtype bf16" all_gather_bench "${Q[@]}" -d bf16
expect_usage $n "out-of-place broadcast" broadcast_bench "${Q[@]}" --inplace no
expect_usage $n "bogus" all_reduce_bench "${Q[@]}" --bogus
expect_usage $n "--routing: 'hot'" all_to_allv_bench "${Q[@]}" --routing hot
expect_usage $n "--routing zipf:-1" all_to_allv_bench "${Q[@]}" --routing zipf:-1
expect_usage $n "--routing learned" all_to_allv_bench "${Q[@]}" --routing learned
expect_usage $n "--top-k 9" all_to_allv_bench "${Q[@]}" --top-k 9
expect_usage $n "out of place only" all_to_allv_bench "${Q[@]}" --inplace yes
expect_usage $n "--routing" all_reduce_bench "${Q[@]}" --routing balanced  # only all_to_allv_bench routes
expect_usage 4 "--experts 6 must be a multiple of the 4 ranks" all_to_allv_bench "${Q[@]}" --experts 6
expect_usage 2 "one token of --top-k x --hidden elements" all_to_allv_bench "${Q[@]}" -b 64 -e 127 --hidden 16
# A size range that rounds to nothing: 4..15 B holds 2 floats per rank at 2 ranks, not 4.
expect_usage 4 "every size rounds down to 0 elements" all_gather_bench "${Q[@]}" -b 4 -e 15
expect_usage 4 "every size rounds down to 0 elements" reduce_scatter_bench "${Q[@]}" -b 4 -e 15 -d int32

[[ "$(md5sum < "$WORK/existing.h5")" == "$sum0" ]] || fail "the refused -O file changed"
[[ ! -e "$WORK/existing.jsonl" ]] || fail "a refused run wrote $WORK/existing.jsonl"

# Controls: the same kinds of command, valid, run.
expect_rc 0 2 all_gather_bench "${Q[@]}" -b 4 -e 15 && pass "control: all_gather -b 4 -e 15 at 2 ranks runs"
expect_rc 0 4 broadcast_bench "${Q[@]}" -b 8 -e 8 --root 3 && pass "control: broadcast --root 3 at 4 ranks runs"
expect_rc 0 2 all_reduce_bench "${Q[@]}" -b 8 -e 8 -d int8,double -o prod,min && pass "control: all_reduce int8,double prod,min runs"
expect_rc 0 2 all_to_allv_bench "${Q[@]}" -b 192 -e 192 --hidden 8 --experts 6 --top-k 6 --routing zipf:0 \
  && pass "control: all_to_allv --experts 6 --top-k 6 at 2 ranks runs"

finish
