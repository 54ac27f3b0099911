#!/usr/bin/env bash
# Four runs of four binaries into one file (--append), at 2 and 4 ranks, read back with
# h5py by hdf5_readback.py: attributes, topology, shapes, values recomputed from the samples,
# and the .jsonl lines. Then -O onto that file without --append must exit 2 and leave both
# files byte for byte unchanged.
source "$(dirname "$0")/lib.bash"

f="$WORK/readback.h5"
ok=1
MESHBENCH_WARMUP=2 expect_rc 0 2 all_reduce_bench -b 8 -e 64K -f 16 -n 3 -d float,int8 -o sum,min --tag qa-a -O "$f" -q || ok=0
expect_rc 0 4 all_to_all_bench -b 0 -e 6000 -f 5 -n 2 -w 1 -d int32 --tag qa-b -O "$f" --append -q || ok=0
expect_rc 0 2 broadcast_bench -b 100 -e 100K -f 10 -n 4 -w 0 -d double --root 1 --tag qa-c -O "$f" --append -q || ok=0
expect_rc 0 2 all_to_allv_bench -b 0 -e 16K -f 4 -n 2 -w 1 --hidden 16 --top-k 2 --experts 4 --routing hot-rank \
  --seed 5 --tag qa-d -O "$f" --append -q || ok=0

cat > "$WORK/expect.json" <<'EOF'
{"runs": [
 {"binary": "all_reduce_bench", "collective": "all_reduce", "world_size": 2, "tag": "qa-a", "series": 8,
  "iters": 3, "warmup": 2, "argv_has": ["-b 8", "-e 64K", "--tag qa-a"], "env_has": {"MESHBENCH_WARMUP": "2"}},
 {"binary": "all_to_all_bench", "collective": "all_to_all", "world_size": 4, "tag": "qa-b", "series": 2,
  "iters": 2, "warmup": 1, "argv_has": ["--append", "-d int32"]},
 {"binary": "broadcast_bench", "collective": "broadcast", "world_size": 2, "tag": "qa-c", "series": 1,
  "iters": 4, "warmup": 0, "argv_has": ["--root 1"]},
 {"binary": "all_to_allv_bench", "collective": "all_to_allv", "world_size": 2, "tag": "qa-d", "series": 1,
  "iters": 2, "warmup": 1, "argv_has": ["--routing hot-rank"]}
]}
EOF

if [[ $ok == 1 ]]; then
  if py "$MB_SRC/tests/mpi/hdf5_readback.py" "$f" "$WORK/expect.json" > "$WORK/check" 2>&1; then
    pass "$(cat "$WORK/check")"
  else
    fail "read-back:"; cat "$WORK/check" >&2
  fi
  # The broadcast rows carry the root; the all_to_all sweep starts at 0 B (a row of 0 elements);
  # all_to_allv's count column is tokens and its run carries the routing.
  if py - "$f" > "$WORK/check" 2>&1 <<'EOF'; then pass "root column, 0-byte row, counts rounded to 4 ranks"; else fail "root / zero-size rows:"; cat "$WORK/check" >&2; fi
import sys, h5py
h = h5py.File(sys.argv[1], "r")
for rid, run in h["runs"].items():
    for coll, c in run["collectives"].items():
        for name, g in c.items():
            summ = g["summary"][()]
            if coll == "broadcast":
                assert int(g.attrs["root"]) == 1 and all(summ["root"] == 1), f"{name}: root {g.attrs['root']} {summ['root']}"
            else:
                assert all(summ["root"] == -1), f"{name}: root column {summ['root']} for a rootless collective"
            if coll == "all_to_all":
                assert summ["count"][0] == 0 and summ["bytes"][0] == 0, f"{name}: first row {summ[0]}"
                assert all(summ["count"] % 4 == 0), f"{name}: counts {summ['count']} not multiples of 4 ranks"
            if coll == "all_to_allv":  # tokens of 2 x 16 floats; the routing stored with the run
                a = run.attrs
                assert (a["routing"], int(a["top_k"]), int(a["experts"]), int(a["hidden"]), int(a["routing_seed"])) == \
                    ("hot-rank", 2, 4, 16, 5), dict(a)
                assert list(summ["count"]) == [0, 2, 8, 32, 128] and all(summ["bytes"] == summ["count"] * 128), summ
print("ok")
EOF

  # Never overwrite: without --append the existing file is refused and left as it was.
  before=$(md5sum "$f" "${f%.h5}.jsonl" | cut -d' ' -f1 | tr '\n' ' ')
  if expect_rc 2 2 all_reduce_bench -b 8 -e 8 -n 1 -O "$f" -q; then
    grep -q -- "-O/--output" "$WORK/err" || fail "refusal does not name -O/--output: $(cat "$WORK/err")"
    [[ $(grep -c . "$WORK/err") -eq 1 ]] || fail "refusal printed $(grep -c . "$WORK/err") stderr lines"
    after=$(md5sum "$f" "${f%.h5}.jsonl" | cut -d' ' -f1 | tr '\n' ' ')
    [[ "$before" == "$after" ]] && pass "-O onto an existing file: exit 2, file and .jsonl unchanged" \
      || fail "the refused run changed the file ($before -> $after)"
  fi
fi

finish
