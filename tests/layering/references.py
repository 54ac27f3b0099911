#!/usr/bin/env python3
"""layering.references: every file a tracked file names exists (issue 47: the repository stands
alone). Two kinds of names are checked in every tracked text file:
  - a bare document name in capitals, such as README.md: a tracked file of that name;
  - a bare source or script name in lower case, such as model.cpp or sweep.py (the extensions
    hpp cpp cu cuh py sh): a tracked file of that name somewhere in the tree;
  - a path to a source, script or page, DIR/NAME.EXT with EXT one of the suite's
    (hpp cpp cu cuh h c py sh md toml txt cmake sbatch), relative to the repository root, to
    the naming file's folder, to src/ or parallel/ (the include roots: "comm/mesh.hpp"), to
    tests/ or to scripts/ (a tracked file or folder).
A path also resolves when a tracked path ends with it ("cuda/backend_cuda.cu" below
parallel/kernels/, "../comm/mesh.hpp"). Placeholders in a path (a name in capitals or of one
letter: docs/X.md, OUT/table.md), names under build/, results/ or /tmp (outputs) and the
files of other projects the docs cite (CITED, each with its project) are not references.
Usage: references.py [--self-test]   (exit 1 naming each missing reference as file:line: name)
"""
import os
import re
import subprocess
import sys
import tempfile

EXTS = "hpp|cpp|cu|cuh|h|c|py|sh|md|toml|txt|cmake|sbatch"
PATH_RE = re.compile(r"(?<![\w./$<{-])((?:\.\./)*[A-Za-z_][\w.-]*(?:/[\w.-]+)+\.(?:%s))(?![\w/])" % EXTS)
DOC_RE = re.compile(r"(?<![\w./-])([A-Z][A-Z_]+\.md)\b")
BARE_RE = re.compile(r"(?<![\w./$<{*-])([a-z_][a-z0-9_]*\.(?:hpp|cpp|cu|cuh|py|sh))(?![\w/.])")
OUTPUT_ROOTS = ("build/", "results/", "tmp/", "out/", "runs/", "plots/")
ROOTS = ("", "src", "parallel", "tests", "scripts")
# Files of other projects, cited by their own paths (the project is named beside each).
CITED = {
    "src/common.cu": "nccl-tests",
    "scripts/train/benchmarking/README.md": "MosaicML llm-foundry",
    "pranjalssh/fast.cu": "a GitHub repository (owner/name), not a file",
    "train_gpt2.cu": "llm.c",
    "test_mappings.py": "Megatron-LM",
}


def placeholder(path):
    """docs/X.md, OUT/table.md, tests/mpi/TEST.sh, examples/clusters/x.toml."""
    for part in path.split("/"):
        stem = part.split(".")[0]
        if len(stem) == 1 or (stem.isupper() and stem.isalpha()):
            return True
    return False


def tracked(root):
    out = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True, text=True, check=True).stdout
    return [p for p in out.split("\0") if p]


def check(root, files):
    have = set(files)
    dirs = {os.path.dirname(p) for p in files}
    while True:
        more = {os.path.dirname(d) for d in dirs} - dirs
        if not more:
            break
        dirs |= more
    names = {os.path.basename(p) for p in files}
    suffixes = set()
    for p in files:
        parts = p.split("/")
        for i in range(1, len(parts)):
            suffixes.add("/".join(parts[i:]))

    def exists(p):
        p = os.path.normpath(p)
        return p in have or p in dirs

    def resolves(p, here):
        bare = p
        while bare.startswith("../"):
            bare = bare[3:]
        return any(exists(os.path.join(r, p)) for r in ROOTS) or exists(os.path.join(here, p)) or bare in suffixes
    missing = []
    for rel in files:
        path = os.path.join(root, rel)
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue
        if rel.startswith("tests/layering/references.py"):
            continue
        here = os.path.dirname(rel)
        for n, line in enumerate(text.splitlines(), 1):
            if "://" in line and "github" in line.lower():
                line = re.sub(r"\S+://\S+", "", line)
            for m in DOC_RE.finditer(line):
                if m.group(1) not in names:
                    missing.append(f"{rel}:{n}: {m.group(1)}")
            for m in BARE_RE.finditer(line):
                if m.group(1) not in names and m.group(1) not in CITED:
                    missing.append(f"{rel}:{n}: {m.group(1)}")
            for m in PATH_RE.finditer(line):
                p = m.group(1)
                if p.startswith(OUTPUT_ROOTS) or "/tmp/" in p or p in CITED or placeholder(p):
                    continue
                if not resolves(p, here):
                    missing.append(f"{rel}:{n}: {p}")
    return missing


def self_test():
    with tempfile.TemporaryDirectory() as d:
        run = lambda *a: subprocess.run(["git", "-C", d, *a], check=True, capture_output=True)
        run("init", "-q")
        os.makedirs(os.path.join(d, "src", "comm"))
        files = {"src/comm/mesh.hpp": "// see comm/mesh.hpp and docs/a.md\n",
                 "docs/a.md": "ok: src/comm/mesh.hpp, ../src/comm/mesh.hpp; out: results/x.h5, build/bin/y.txt\n",
                 "tests/t.sh": "# gone: engine/tp_layers.hpp, NOWHERE.md and console.hpp; fine: docs/X.md, "
                               "../comm/mesh.hpp, mesh.hpp, t.sh\n"}
        for p, t in files.items():
            os.makedirs(os.path.join(d, os.path.dirname(p)), exist_ok=True)
            open(os.path.join(d, p), "w").write(t)
        run("add", "-A")
        got = check(d, tracked(d))
        want = ["tests/t.sh:1: NOWHERE.md", "tests/t.sh:1: console.hpp", "tests/t.sh:1: engine/tp_layers.hpp"]
        if sorted(got) != sorted(want):
            print(f"references self-test: got {got}, want {want}", file=sys.stderr)
            return 1
    print("references self-test: a missing page, a moved path and a renamed file are found, outputs and real paths pass")
    return 0


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if "--self-test" in sys.argv[1:]:
        return self_test()
    missing = check(root, tracked(root))
    for m in missing:
        print(f"references: {m}: no such file in the repository", file=sys.stderr)
    if missing:
        print(f"references: {len(missing)} reference(s) to files that do not exist", file=sys.stderr)
        return 1
    print(f"references: every named file exists ({len(tracked(root))} tracked files read)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
