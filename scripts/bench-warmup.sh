#!/usr/bin/env bash
# Does the default warm-up converge at every size? (issue 23) In each of R rounds, fresh
# processes run all_reduce_bench twice at 2 ranks over the same sizes: with its defaults
# (adaptive warm-up, --min-time), and converged (a fixed 1000-call warm-up, -n 200). Then per
# size and placement: the ratio default / converged of the median time, each round's and their median over
# the rounds (interleaved, so the machine's drift hits both alike). The rule: the median ratio
# is within 1.1 at every size. A benchmark, not a test: run it on an otherwise idle machine.
#   scripts/bench-warmup.sh [ROUNDS] [MIN] [MAX]        (defaults 5, 8, 64K; BUILD=build)
# Prints one row per size and exits 1 when some size breaks the rule.
set -u
case "${1:-}" in
  -h | --help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
[[ "${1:-5}" =~ ^[1-9][0-9]*$ ]] || { echo "bench-warmup: ROUNDS must be a positive integer, got '$1' (--help)" >&2; exit 2; }
here="$(cd "$(dirname "$0")/.." && pwd)"
bin="${BIN:-$here/${BUILD:-build}/bin}"
rounds=${1:-5} lo=${2:-8} hi=${3:-64K}
work=$(mktemp -d /tmp/bench-warmup.XXXXXX)
trap 'rm -rf "$work"' EXIT
common=(-b "$lo" -e "$hi" -f 2 -d float -o sum -q)  # both placements, as by default
uptime
for ((r = 1; r <= rounds; ++r)); do
  mpiexec -n 2 "$bin/all_reduce_bench" "${common[@]}" -O "$work/default-$r.h5" > /dev/null || exit 2
  mpiexec -n 2 "$bin/all_reduce_bench" "${common[@]}" -w ${CONVERGED_WARMUP:-1000} -n 200 -O "$work/converged-$r.h5" > /dev/null || exit 2
done
uptime
/usr/bin/python3 - "$work" "$rounds" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def medians(path):
    return {(j["bytes"], j["placement"]): j["t_median"] for j in map(json.loads, open(path))}
ratios, warm = {}, {}
for r in range(1, rounds + 1):
    d = medians(f"{work}/default-{r}.jsonl")
    c = medians(f"{work}/converged-{r}.jsonl")
    for b in sorted(d):
        ratios.setdefault(b, []).append(d[b] / c[b])
    for j in map(json.loads, open(f"{work}/default-{r}.jsonl")):
        warm.setdefault((j["bytes"], j["placement"]), []).append(j["warmup_calls"])
bad = 0
print(f"{'bytes':>8} {'placement':>12} {'median ratio':>12}  rounds (default / converged)   warm-up calls (default)")
for (b, pl), v in sorted(ratios.items()):
    m = statistics.median(v)
    bad += m > 1.1
    print(f"{b:>8} {pl:>12} {m:>12.3f}  {' '.join(f'{x:.2f}' for x in v)}   {' '.join(str(w) for w in warm[(b, pl)])}"
          f"{'   > 1.1' if m > 1.1 else ''}")
sys.exit(1 if bad else 0)
PY
