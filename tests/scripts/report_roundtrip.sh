#!/usr/bin/env bash
# scripts/report on files the binaries write here: every number in the JSON, CSV and Markdown
# tables equals the HDF5 file (read independently by h5truth.py); filters keep exactly the
# matching rows; --compare ratios equal t(B)/t(A) from the files; bad filters exit 2.
. "$(dirname "$0")/lib.bash"
R="$MB_SRC/scripts/report"
T="$MB_SRC/tests/scripts/h5truth.py"
SZ=(-b 8 -e 64K -f 8 -n 5 -w 1 -c 1)

run2 UCX_TLS=self,sm -- all_reduce_bench "${SZ[@]}" --tag shm -O "$WORK/shm.h5" || fail "all_reduce shm run failed"
run2 UCX_TLS=self,sm -- all_gather_bench "${SZ[@]}" --tag shm -O "$WORK/ag.h5" || fail "all_gather shm run failed"
run2 UCX_TLS=self,tcp UCX_NET_DEVICES=lo -- all_reduce_bench "${SZ[@]}" --tag tcp-lo -O "$WORK/tcp.h5" \
  || fail "all_reduce tcp-lo run failed"
FILES=("$WORK/shm.h5" "$WORK/ag.h5" "$WORK/tcp.h5")

py "$R" "${FILES[@]}" -f json -o "$WORK/r.json" || fail "report json exit $?"
py "$T" json "$WORK/r.json" "${FILES[@]}" || fail "json rows differ from the files"
py "$R" "${FILES[@]}" -f csv -o "$WORK/r.csv" || fail "report csv exit $?"
py "$T" csv "$WORK/r.csv" "${FILES[@]}" || fail "csv rows differ from the files"
py "$R" "$WORK" -o "$WORK/r.md" || fail "report md (folder argument) exit $?"
py "$T" md "$WORK/r.md" "${FILES[@]}" || fail "markdown rows differ from the files"
grep -q '^| binary | tag | backend | ranks | nodes | group |' "$WORK/r.md" || fail "markdown header lacks the issue's columns"
pass "json, csv and markdown tables equal the files"

# Filters: the rows kept are exactly those the file holds for that selection (counted by h5py).
n=$(py "$R" "${FILES[@]}" -f json --where tag=shm --where 'bytes>=1K' --where collective=all_reduce \
     | py -c 'import json,sys; r=json.load(sys.stdin); assert all(x["tag"]=="shm" and x["bytes"]>=1024 and x["collective"]=="all_reduce" for x in r), r; print(len(r))')
want=$(py -c '
import h5py,sys
n=0
with h5py.File(sys.argv[1]) as f:
    for run in f["runs"].values():
        for g in run["collectives/all_reduce"].values():
            n += int((g["summary"]["bytes"] >= 1024).sum())
print(n)' "$WORK/shm.h5")
[[ "$n" == "$want" && "$n" -gt 0 ]] || fail "filter kept $n rows, the file has $want"
pass "filters keep exactly the $n matching rows"

# Compare: shm vs tcp-lo all_reduce, ratio per size equal to the files' t_median ratio.
py "$R" "${FILES[@]}" -f json --compare tag=shm tag=tcp-lo -o "$WORK/c.json" || fail "compare exit $?"
py "$T" compare "$WORK/c.json" "$WORK/shm.h5" "$WORK/tcp.h5" || fail "compare ratios wrong"
py "$R" "${FILES[@]}" --compare tag=shm tag=tcp-lo > "$WORK/c.md" || fail "compare md exit $?"
grep -q 'time tcp-lo/shm' "$WORK/c.md" || fail "compare table lacks the ratio column"
pass "compare ratios equal t(tcp-lo)/t(shm) from the files"

# Refusals: unknown column is bad usage (2); no matching rows is 1; a missing file is 1.
rc=0; py "$R" "${FILES[@]}" --where nosuch=1 2> "$WORK/err" >/dev/null || rc=$?
[[ $rc -eq 2 ]] && grep -q "unknown column 'nosuch'" "$WORK/err" || fail "bad filter: exit $rc, $(cat "$WORK/err")"
rc=0; py "$R" "${FILES[@]}" --where tag=nosuchtag >/dev/null 2>&1 || rc=$?
[[ $rc -eq 1 ]] || fail "empty selection exit $rc, expected 1"
rc=0; py "$R" "$WORK/missing.h5" >/dev/null 2>&1 || rc=$?
[[ $rc -eq 1 ]] || fail "missing file exit $rc, expected 1"
pass "bad filter exits 2, empty selection and missing file exit 1"
