#!/usr/bin/env bash
# scripts/calibrate on files the binaries write here: one fit per (collective, fabric tag) with
# the key read from the runs (2 ranks, intra, float), one point per size the file holds, at the
# file's t_median_max; the calibration file's attributes and sources; --plot's figures; exit 2
# for a results file without collective runs, for the JSON-lines file and for a missing path.
. "$(dirname "$0")/lib.bash"
C="$MB_SRC/scripts/calibrate"
SZ=(-b 8 -e 64K -f 2 -n 5 -w 1 --inplace no)

run2 UCX_TLS=self,sm -- all_reduce_bench "${SZ[@]}" --tag shm -O "$WORK/ar.h5" || fail "all_reduce shm run failed"
run2 UCX_TLS=self,sm -- all_gather_bench "${SZ[@]}" --tag shm -O "$WORK/ag.h5" || fail "all_gather shm run failed"
run2 UCX_TLS=self,tcp UCX_NET_DEVICES=lo -- all_reduce_bench "${SZ[@]}" --tag tcp-lo -O "$WORK/tcp.h5" \
  || fail "all_reduce tcp-lo run failed"

py "$C" --out "$WORK/cal.h5" --plot "$WORK/plots" "$WORK/ar.h5" "$WORK/ag.h5" "$WORK/tcp.h5" > "$WORK/out.md" \
  || fail "calibrate exit $?: $(cat "$WORK/out.md")"
grep -q '^| collective | backend | dtype | ranks | span | tag | seg | range | alpha (us) |' "$WORK/out.md" \
  || fail "no fit table: $(head -5 "$WORK/out.md")"
[[ -s "$WORK/plots/fits.png" && -s "$WORK/plots/fit-errors.png" ]] || fail "--plot wrote no figures"
py - "$WORK/cal.h5" "$WORK/ar.h5" "$WORK/ag.h5" "$WORK/tcp.h5" <<'PY' || fail "calibration file does not match the runs"
import json, sys
import h5py, numpy as np
cal, files = sys.argv[1], sys.argv[2:]
with h5py.File(cal) as f:
    assert f.attrs["kind"] == "meshbench calibration" and f.attrs["format_version"] == 2, dict(f.attrs)
    assert [s["file"] for s in json.loads(f.attrs["sources"])] == files
    fits, pts = f["collectives/fits"][()], f["collectives/points"][()]
    keys = sorted({(r["collective"], r["tag"], r["backend"], r["dtype"], int(r["group_size"]), r["span"]) for r in fits})
    assert keys == [(b"all_gather", b"shm", b"mpi", b"float", 2, b"intra"), (b"all_reduce", b"shm", b"mpi", b"float", 2, b"intra"),
                    (b"all_reduce", b"tcp-lo", b"mpi", b"float", 2, b"intra")], keys
    assert all(r["alpha"] >= 0 and r["beta"] >= 0 for r in fits)
    for path, coll, tag in zip(files, (b"all_reduce", b"all_gather", b"all_reduce"), (b"shm", b"shm", b"tcp-lo")):
        with h5py.File(path) as g:
            (run,) = g["runs"].values()
            (series,) = run[f"collectives/{coll.decode()}"].values()
            s = series["summary"][()]
        mine = pts[(pts["collective"] == coll) & (pts["tag"] == tag)]
        assert list(mine["bytes"]) == list(s["bytes"]), (path, mine["bytes"], s["bytes"])
        assert np.array_equal(mine["t"], s["t_median_max"]), path
PY
pass "one fit per collective and tag, every size at the file's t_median_max, sources and figures"

# Bad input: exit 2, one line naming the file and the rule, nothing written.
"$MB_BIN/step_bench" --model tiny --steps 1 --warmup 0 --threads 1 --quiet -O "$WORK/step.h5" > /dev/null 2>&1 \
  || fail "step_bench run failed"
for bad in "$WORK/step.h5:no collective runs" "$WORK/ar.jsonl:not a readable HDF5 file" \
           "$WORK/missing.h5:no such file or folder"; do
  path=${bad%%:*} rule=${bad#*:}
  rc=0; py "$C" --out "$WORK/never.h5" "$path" > /dev/null 2> "$WORK/err" || rc=$?
  [[ $rc -eq 2 && $(wc -l < "$WORK/err") -eq 1 ]] && grep -qF "calibrate: $path: $rule" "$WORK/err" \
    || fail "$path: exit $rc, $(cat "$WORK/err")"
  [[ ! -e "$WORK/never.h5" ]] || fail "$path: a calibration file was written"
done
pass "a step file, a JSON-lines file and a missing path exit 2 naming the file and the rule"
