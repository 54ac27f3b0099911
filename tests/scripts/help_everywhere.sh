# --help everywhere (issue 45, items 14 and 15): every user binary in $MB_BIN (the list is the
# binaries' own, `mesh_info --list-json`'s "binaries", not the test binaries beside them) and
# every executable file in scripts/ answer --help (scripts also -h) with exit 0 within
# $HELP_LIMIT seconds (default 2), a non-empty usage on stdout, and no file written in their
# scratch working directory or $TMPDIR: --help starts nothing. A file in scripts/ that starts
# with #! but is not executable fails too (the docs run them as ./scripts/NAME).
source "$(dirname "$0")/lib.bash"

limit="${HELP_LIMIT:-2}"
bins=$("$MB_BIN/mesh_info" --list-json | "$MB_PYTHON" -c 'import json, sys; print(" ".join(json.load(sys.stdin)["binaries"]))') \
  || fail "mesh_info --list-json gave no binaries"
[[ -n "$bins" ]] || fail "mesh_info --list-json lists no binaries"

bad=()
checked=0
# probe NAME PROGRAM FLAG: PROGRAM FLAG in an empty folder; records what went wrong in bad.
probe() {
  local name=$1 prog=$2 flag=$3 dir="$WORK/run.$checked" rc=0
  mkdir -p "$dir/tmp"
  (cd "$dir" && TMPDIR="$dir/tmp" timeout -k 1 "$limit" "$prog" "$flag" > "$WORK/out" 2> "$WORK/err" < /dev/null) || rc=$?
  checked=$((checked + 1))
  local left
  left=$(cd "$dir" && find . -mindepth 1 ! -path ./tmp | head -5 | tr '\n' ' '; find tmp -mindepth 1 | head -5 | tr '\n' ' ')
  if [[ $rc -eq 124 || $rc -eq 137 ]]; then
    bad+=("$name $flag: still running after $limit s (it started work instead of printing its usage)")
  elif [[ $rc -ne 0 ]]; then
    bad+=("$name $flag: exit $rc, not 0 ($(head -c 160 "$WORK/err" | tr '\n' ' '))")
  elif [[ ! -s "$WORK/out" ]]; then
    bad+=("$name $flag: no usage on stdout ($(head -c 120 "$WORK/err" | tr '\n' ' '))")
  fi
  [[ -z "$left" ]] || bad+=("$name $flag: wrote $left")
  rm -rf "$dir"
}

for b in $bins; do
  [[ -x "$MB_BIN/$b" ]] || { bad+=("$b: listed by mesh_info --list-json but not in $MB_BIN"); continue; }
  probe "$b" "$MB_BIN/$b" --help
done
nscripts=0
for f in "$MB_SRC"/scripts/*; do
  [[ -f "$f" ]] || continue
  if [[ ! -x "$f" ]]; then
    head -c 2 "$f" | grep -q '#!' && bad+=("scripts/$(basename "$f"): starts with #! but is not executable (git update-index --chmod=+x)")
    continue
  fi
  nscripts=$((nscripts + 1))
  for flag in --help -h; do probe "scripts/$(basename "$f")" "$f" "$flag"; done
done

if [[ ${#bad[@]} -gt 0 ]]; then
  printf '  %s\n' "${bad[@]}" >&2
  fail "${#bad[@]} of $checked --help probes failed"
fi
pass "$checked --help probes ($(wc -w <<< "$bins") binaries, $nscripts scripts with --help and -h): exit 0, usage on stdout, nothing written"
