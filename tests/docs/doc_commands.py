#!/usr/bin/env python3
"""docs.commands: every command shown in README.md and docs/*.md runs (docs/testing.md).

Each fenced block of those pages says what it is in its info string:
  ```sh runnable [timeout=S] [exit=N] [needs=root]
                                            run from a scratch copy of the repository root; the
                                            block must exit 0 (or N: a refusal shown on purpose)
  ```sh not-runnable: REASON                 never run; the reason is required
  ```text, ```toml, ```python, ...          not a shell block (output, file contents)
A shell block (sh, bash, shell, console) marked neither way, a block without an info string,
a command line hidden in a non-shell block, a bare binary name where build/bin/NAME is meant,
and a relative link or #anchor that does not resolve all fail the test.

Runnable blocks run as a reader pastes them: every page's in order (README.md first, then
docs/*.md in alphabetical order, then results/README.md: pages()), all in ONE copy of the
working tree (tracked and untracked-but-not-ignored files) with build/ linked to the build
under test, so nothing lands in the repository. Every block may write only under results/, and
only files no other page wrote: after each block the copy's files are compared with those
before it (build/ and __pycache__/ ignored), and a file created, changed or removed outside
results/, or under results/ a file an earlier page wrote, fails the test naming the file and
the block. Each block is one `bash -e -o pipefail` script with a timeout (default 90 s) and a
small environment (TINY_ENV below) that shrinks the binaries' defaults; options given on a
command line win.

Not here: what a command prints (the suite's own tests check outputs); speed.
Usage: doc_commands.py [--list] [--check-only] [--only SUBSTRING] [--keep-going] [--self-test]
"""
import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

SRC = os.environ.get("MB_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("MB_BIN") or os.path.join(SRC, "build", "bin")
SHELL_LANGS = {"sh", "bash", "shell", "console", "zsh"}
DEFAULT_TIMEOUT = 90

# Defaults the binaries read from the environment (every option has a MESHBENCH_* twin), set
# for every runnable block so that a command without explicit sizes stays small. A flag on the
# command line wins over these. MAX is scripts/run-local.sh's largest size (`make run`).
TINY_ENV = {
    "MESHBENCH_ITERS": "3",           # collectives: exactly 3 timed iterations per size
    "MESHBENCH_WARMUP": "1",          # and 1 warm-up call (no adaptive warm-up)
    "MESHBENCH_MAX_BYTES": "64K",     # largest size when -e is not given
    "MESHBENCH_STEP_STEPS": "2",      # step_bench: timed steps when --steps is not given
    "MESHBENCH_STEP_WARMUP": "1",
    "MESHBENCH_STEP_THREADS": "1",
    "MAX": "64K",                     # make run (scripts/run-local.sh)
    "MB_PLOTS": "0",                  # sbatch templates: no matplotlib figures
}

# Command words that must not appear bare in a shell block: build/bin/<name> runs from the
# repository root, <name> alone does not.
BINARY_RE = r"(?:[a-z_]+_bench|mesh_info)"
# The before-stop hook's pattern for a bare binary at the start of any line of a page.
HOOK_BARE_RE = re.compile(r"^(step_bench|[a-z_]+_bench|mpiexec -n [0-9]+ [a-z_]+_bench) +-")
# A line of a non-shell block that is a command someone would paste (a "$ " transcript line
# is output, not an instruction).
COMMANDISH_RE = re.compile(r"^\s*(?:[A-Z_][A-Z0-9_]*=\S*\s+)*"
                           r"(?:build/bin/\w|mpiexec\s|mpirun\s|srun\s|sbatch\s|scripts/\w|make(?:\s|$)|ctest\s)")


class Block:
    def __init__(self, path, line, info, text):
        self.path, self.line, self.info, self.text = path, line, info.strip(), text
        self.lang = self.info.split()[0].lower() if self.info else ""
        self.mode, self.reason, self.timeout, self.needs_root = None, "", DEFAULT_TIMEOUT, False
        self.want = 0  # the exit code the block must end with

    def where(self):
        return f"{os.path.relpath(self.path, SRC)}:{self.line}"


def parse_blocks(path, lines):
    """Fenced blocks of one page (``` only; indented fences inside list items included)."""
    blocks, i = [], 0
    while i < len(lines):
        m = re.match(r"^(\s*)(```+)(.*)$", lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m.group(1), m.group(2), m.group(3)
        body, j = [], i + 1
        while j < len(lines) and not re.match(r"^\s*" + fence + r"\s*$", lines[j]):
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        blocks.append(Block(path, i + 1, info, "\n".join(body) + "\n"))
        i = j + 1
    return blocks


def classify(b):
    """Sets b.mode to runnable / not-runnable / other; returns a list of problems."""
    if not b.info:
        return [f"{b.where()}: fenced block without an info string (say `sh runnable`, "
                "`sh not-runnable: why`, `text`, `toml`, ...)"]
    if b.info.startswith("~") or "`" in b.info:
        return [f"{b.where()}: odd info string {b.info!r}"]
    if b.lang not in SHELL_LANGS:
        b.mode = "other"
        bad = [l for l in b.text.splitlines() if COMMANDISH_RE.match(l)]
        if bad:
            return [f"{b.where()}: a command in a `{b.lang}` block ({bad[0].strip()[:70]!r}): put commands "
                    "in a `sh runnable` or `sh not-runnable: why` block, output in `text`"]
        return []
    rest = b.info[len(b.info.split()[0]):].strip()
    m = re.match(r"^not-runnable:\s*(.*)$", rest)
    if m:
        if not m.group(1).strip():
            return [f"{b.where()}: `not-runnable:` needs a reason"]
        b.mode, b.reason = "not-runnable", m.group(1).strip()
        return []
    words = rest.split()
    if not words or words[0] != "runnable":
        return [f"{b.where()}: shell block marked neither `runnable` nor `not-runnable: REASON` "
                f"(info string {b.info!r})"]
    b.mode = "runnable"
    for w in words[1:]:
        if re.match(r"^timeout=\d+$", w):
            b.timeout = int(w.split("=")[1])
        elif re.match(r"^exit=\d+$", w):
            b.want = int(w.split("=")[1])
        elif w == "needs=root":
            b.needs_root = True
        else:
            return [f"{b.where()}: unknown attribute {w!r} (timeout=S, exit=N, needs=root)"]
    return []


def bare_binaries(b):
    """Command words naming a binary without build/bin/ (they fail when pasted)."""
    probs = []
    for n, line in enumerate(b.text.splitlines()):
        code = line.split("#", 1)[0] if not line.lstrip().startswith("#") else ""
        for m in re.finditer(r"(?:^|[\s;|&(])(" + BINARY_RE + r")(?=\s|$)", code):
            probs.append(f"{b.where()}+{n + 1}: bare `{m.group(1)}`: write build/bin/{m.group(1)} "
                         "(commands run from the repository root)")
    return probs


def slug(text, seen):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    s = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text.strip())
    s = re.sub(r"[^\w\- ]", "", s.lower()).replace(" ", "-")
    k = seen.get(s, 0)
    seen[s] = k + 1
    return s if k == 0 else f"{s}-{k}"


_ANCHORS = {}


def anchors_of(path):
    cache = _ANCHORS
    if path not in cache:
        seen, out, fence = {}, set(), False
        with open(path, encoding="utf-8") as f:
            for line in f:
                if re.match(r"^\s*```", line):
                    fence = not fence
                m = None if fence else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
                if m:
                    out.add(slug(m.group(1), seen))
        cache[path] = out
    return cache[path]


def check_links(path, lines):
    """Relative links and anchors of one page resolve (code spans and blocks excluded)."""
    probs, fence = [], False
    for n, line in enumerate(lines):
        if re.match(r"^\s*```", line):
            fence = not fence
            continue
        if fence:
            continue
        prose = re.sub(r"`[^`]*`", "", line)
        for m in re.finditer(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", prose):
            target = m.group(1)
            if re.match(r"^[a-z]+:", target):
                continue
            file_part, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            where = f"{os.path.relpath(path, SRC)}:{n + 1}"
            if not os.path.exists(dest):
                probs.append(f"{where}: link to {target}: {os.path.relpath(dest, SRC)} does not exist")
            elif anchor and dest.endswith(".md") and anchor not in anchors_of(dest):
                probs.append(f"{where}: link to {target}: no heading #{anchor} in {os.path.relpath(dest, SRC)}")
    return probs


def pages():
    """The pages in the order they run: README.md, docs/*.md alphabetically, results/README.md."""
    out = [os.path.join(SRC, "README.md")]
    docs = os.path.join(SRC, "docs")
    out += sorted(os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))
    res = os.path.join(SRC, "results", "README.md")
    return out + ([res] if os.path.exists(res) else [])


def check_pages(paths):
    """Every block of every page classified; returns (blocks, problems)."""
    blocks, probs = [], []
    for p in paths:
        with open(p, encoding="utf-8") as f:
            lines = f.read().splitlines()
        for n, line in enumerate(lines):
            if HOOK_BARE_RE.match(line):
                probs.append(f"{os.path.relpath(p, SRC)}:{n + 1}: a line that starts with a bare binary "
                             f"({line[:60]!r}): write build/bin/...")
        probs += check_links(p, lines)
        for b in parse_blocks(p, lines):
            probs += classify(b)
            if b.mode in ("runnable", "not-runnable"):
                probs += bare_binaries(b)
            blocks.append(b)
    return blocks, probs


def repo_snapshot():
    """What git sees in the repository outside build/ (the litter check)."""
    r = subprocess.run(["git", "-C", SRC, "status", "--porcelain", "--ignored", "--untracked-files=all"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None
    return {l for l in r.stdout.splitlines()
            if not re.match(r"^.. (build[^/]*/|.*__pycache__/)", l)}


def tree_state(root):
    """Every file and folder of a scratch copy (build/ and __pycache__/ left out): path -> what
    identifies its content (size, mtime, inode; 'dir' for a folder)."""
    state = {}
    for d, dirs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        dirs[:] = [x for x in dirs if x != "__pycache__" and not (rel == "." and x == "build")]
        for x in dirs:
            state[os.path.normpath(os.path.join(rel, x))] = "dir"
        for x in files:
            p = os.path.join(d, x)
            try:
                st = os.lstat(p)
            except OSError:
                continue  # removed while walking
            state[os.path.normpath(os.path.join(rel, x))] = (st.st_size, st.st_mtime_ns, st.st_ino)
    return state


def under_results(path):
    return path == "results" or path.startswith("results" + os.sep)


class WriteCheck:
    """What each block wrote into the one scratch tree: only under results/, and there only files
    that no other page wrote (a second page writing results/step.h5 is what a reader pasting the
    pages in order meets as exit 2, or silently mixed results)."""

    def __init__(self, root):
        self.root, self.state = root, tree_state(root)
        self.owner = {}      # path under results/ -> the block that first wrote it
        self.problems = []

    def after(self, b):
        new = tree_state(self.root)
        changed = sorted(p for p in set(new) | set(self.state)
                         if new.get(p) != self.state.get(p)
                         and not (new.get(p) == "dir" and self.state.get(p) == "dir"))
        new_dirs = set()  # folders created outside results/: named once, not file by file
        for p in changed:
            what = "created" if p not in self.state else "removed" if p not in new else "changed"
            if not under_results(p):
                if os.path.dirname(p) in new_dirs:
                    if new.get(p) == "dir":
                        new_dirs.add(p)
                    continue
                if what == "created" and new.get(p) == "dir":
                    new_dirs.add(p)
                    p += "/ (a folder)"
                self.problems.append(f"{b.where()} {what} {p}, outside results/ (documented commands "
                                     "write under results/<page>/)")
                continue
            if new.get(p) == "dir" or self.state.get(p) == "dir":
                continue
            first = self.owner.setdefault(p, b)
            if first.path != b.path:
                self.problems.append(f"{b.where()} {what} {p}, which {first.where()} wrote (names under "
                                     "results/ are unique to their page: results/<page>/...)")
        self.state = new


def make_root(work, name):
    """A copy of the working tree (no .git, no build) with build/ linked to the build under test."""
    root = os.path.join(work, name)
    os.makedirs(root)
    r = subprocess.run(["git", "-C", SRC, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                       capture_output=True)
    files = [f for f in r.stdout.decode().split("\0") if f] if r.returncode == 0 else []
    if not files:
        raise SystemExit("docs.commands: cannot list the working tree's files with git")
    for f in files:
        s = os.path.join(SRC, f)
        if not os.path.isfile(s):
            continue  # deleted in the working tree
        d = os.path.join(root, f)
        os.makedirs(os.path.dirname(d), exist_ok=True)
        shutil.copy2(s, d)
    os.symlink(os.path.dirname(os.path.abspath(BIN)), os.path.join(root, "build"))
    os.makedirs(os.path.join(root, "results"), exist_ok=True)
    return root


def free_port():
    for _ in range(50):
        port = 20000 + int.from_bytes(os.urandom(2), "little") % 20000
        ok = True
        for p in (port, port + 1):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
        if ok:
            return port
    return 26817


def block_env(work):
    env = dict(os.environ)
    for k in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"):
        env.pop(k, None)
    env.update(TINY_ENV)
    env["MB_BIN"] = os.path.abspath(BIN)
    # Oversubscribed runs (more ranks than cores) yield the core while MPICH polls, as the MPI
    # tests do (tests/support/ucx_yield.c); hydra passes LD_PRELOAD on to every rank.
    yld = os.environ.get("MB_UCX_YIELD") or os.path.join(os.path.dirname(os.path.abspath(BIN)), "tests",
                                                          "libucx_yield.so")
    if os.path.isfile(yld):
        env["LD_PRELOAD"] = yld
    # A private Slurm of this test's own (scripts/slurm-local): its folder and ports.
    env["MB_SLURM_DIR"] = os.path.join(work, "slurm")
    env["MB_SLURM_PORT"] = str(free_port())
    env["PATH"] = env.get("PATH", "/usr/bin:/bin") + ":/usr/sbin:/sbin"
    return env


def run_block(b, root, env, logdir, idx):
    script = os.path.join(logdir, f"{idx:03d}.sh")
    log = os.path.join(logdir, f"{idx:03d}.log")
    with open(script, "w") as f:
        f.write(f"# {b.where()}\n{b.text}")
    t0 = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(["bash", "-e", "-o", "pipefail", script], cwd=root, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=b.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            rc = 124
    # Nothing a block started may outlive it (a daemon, a rank stuck in MPI_Finalize).
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return rc, time.monotonic() - t0, log


def run_blocks(blocks, root, env, logdir):
    """Runs the blocks in order in one tree; returns (failed, skipped, run, write problems)."""
    failed, skipped, nrun = [], [], 0
    check = WriteCheck(root)
    for idx, b in enumerate(blocks, 1):
        if b.needs_root and os.geteuid() != 0:
            skipped.append(b)
            print(f"skip {b.where()}: needs root")
            continue
        rc, dt, log = run_block(b, root, env, logdir, idx)
        nrun += 1
        n = len(check.problems)
        check.after(b)
        ok = rc == b.want
        wrote = len(check.problems) - n
        print(f"{'ok  ' if ok and not wrote else 'FAIL'} {b.where():28} {dt:6.1f} s" + (f"  exit {rc}" if rc else "")
              + (f"  {wrote} write(s) out of place" if wrote else ""))
        sys.stdout.flush()
        if not ok:
            failed.append(b)
            with open(log, errors="replace") as f:
                tail = f.read().splitlines()[-30:]
            print(f"--- {b.where()} (exit {rc}, want {b.want}{', timed out after %d s' % b.timeout if rc == 124 else ''}):\n"
                  + b.text + "--- its output, last lines:\n" + "\n".join(tail), file=sys.stderr)
    return failed, skipped, nrun, check.problems


def self_test():
    """The checker itself must fail on each kind of defect it promises to catch."""
    cases = {
        "```sh\nbuild/bin/mesh_info --list-json\n```\n": "marked neither",
        "```sh not-runnable:\nsbatch x\n```\n": "needs a reason",
        "```\nbuild/bin/mesh_info --world 4\n```\n": "without an info string",
        "```text\nmpiexec -n 2 build/bin/all_reduce_bench\n```\n": "a command in a `text` block",
        "```sh runnable\nmpiexec -n 2 all_reduce_bench -b 8\n```\n": "bare `all_reduce_bench`",
        "step_bench --model tiny\n": "bare binary",
        "See [x](no-such-file.md).\n": "does not exist",
        "# Title\nSee [x](#no-such-heading).\n": "no heading",
        "```sh runnable timeout=x\nbuild/bin/mesh_info --list-json\n```\n": "unknown attribute",
        "```sh runnable exit=two\nbuild/bin/mesh_info --world 3 --mesh tp=2\n```\n": "unknown attribute",
    }
    good = ("# A title (`--x`)\n[up](#a-title---x)\n```sh runnable timeout=5\nbuild/bin/mesh_info --list-json\n```\n"
            "```sh runnable exit=2 timeout=5\nbuild/bin/mesh_info --world 3 --mesh tp=2\n```\n"
            "```sh not-runnable: needs a GPU\nbuild/bin/step_bench --device cuda\n```\n"
            "```text\n$ scripts/report x.h5\n| a |\n```\n")
    fails = 0
    with tempfile.TemporaryDirectory() as d:
        for text, want in list(cases.items()) + [(good, None)]:
            p = os.path.join(d, "page.md")
            with open(p, "w") as f:
                f.write(text)
            _ANCHORS.clear()
            _, probs = check_pages([p])
            got = "\n".join(probs)
            ok = (not probs) if want is None else (want in got)
            if not ok:
                fails += 1
                print(f"FAIL [docs.self_test]: {text!r}: want {want!r}, got {got!r}", file=sys.stderr)
    n_run, run_fails = self_test_writes()
    fails += run_fails
    print("docs.self_test: " + ("FAILED" if fails else
                                f"the checker caught all {len(cases) + n_run} defects"))
    return 1 if fails else 0


def self_test_writes():
    """The one-tree run must fail on a block that writes outside results/ (a file, a folder, a
    tracked file changed) and on two pages writing the same file under results/, naming the file
    and the block; pages that keep to results/<page>/ and read an earlier page's file pass.
    Returns (cases, failures)."""
    cases = [  # pages in run order (name, text), what the one problem must say (None: no problem)
        ([("a.md", "```sh runnable\necho x > stray.h5\n```\n")], ["a.md:1 created stray.h5, outside results/"]),
        ([("a.md", "```sh runnable\nmkdir -p plots/x && touch plots/x/a.png plots/b.png\n```\n")],
         ["a.md:1 created plots/ (a folder), outside results/"]),
        ([("a.md", "```sh runnable\necho >> tracked.txt\n```\n")], ["a.md:1 changed tracked.txt, outside results/"]),
        ([("a.md", "```sh runnable\nrm tracked.txt\n```\n")], ["a.md:1 removed tracked.txt, outside results/"]),
        ([("a.md", "```sh runnable\necho 1 > results/step.h5\n```\n"),
          ("b.md", "Text.\n```sh runnable\necho 22 > results/step.h5\n```\n")],
         ["b.md:2 changed results/step.h5, which", "/a.md:1 wrote"]),
        ([("a.md", "```sh runnable\nmkdir -p results/x && echo 1 > results/x/ar.h5\n```\n"),
          ("b.md", "```sh runnable\nrm -r results/x\n```\n")],
         ["b.md:1 removed results/x/ar.h5, which", "/a.md:1 wrote"]),
        ([("a.md", "```sh runnable\nmkdir -p results/a && echo 1 > results/a/ar.h5\n```\n"
                   "```sh runnable\necho 2 >> results/a/ar.h5\n```\n"),
          ("b.md", "```sh runnable\nmkdir -p results/b && cat results/a/ar.h5 > results/b/ar.h5\n```\n")], None),
    ]
    fails = 0
    with tempfile.TemporaryDirectory() as d:
        for n, (pages_, want) in enumerate(cases):
            root = os.path.join(d, f"root{n}")
            os.makedirs(os.path.join(root, "results"))
            os.makedirs(os.path.join(root, "build"))
            with open(os.path.join(root, "tracked.txt"), "w") as f:
                f.write("x\n")
            blocks = []
            for name, text in pages_:
                p = os.path.join(d, f"case{n}", name)
                os.makedirs(os.path.dirname(p), exist_ok=True)
                with open(p, "w") as f:
                    f.write(text)
                blocks += [b for b in parse_blocks(p, text.splitlines()) if not classify(b) and b.mode == "runnable"]
            logdir = os.path.join(d, f"logs{n}")
            os.makedirs(logdir)
            with open(os.devnull, "w") as null:
                out, sys.stdout = sys.stdout, null
                try:
                    failed, _, _, probs = run_blocks(blocks, root, dict(os.environ), logdir)
                finally:
                    sys.stdout = out
            got = "\n".join(probs)
            ok = not failed and ((not probs) if want is None else all(w in got for w in want) and len(probs) == 1)
            if not ok:
                fails += 1
                print(f"FAIL [docs.self_test]: pages {[t for _, t in pages_]!r}: want {want!r}, got {got!r}"
                      + (f", failed blocks {[b.where() for b in failed]}" if failed else ""), file=sys.stderr)
    return sum(w is not None for _, w in cases), fails


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--list", action="store_true", help="list every shell block and its mark, run nothing")
    ap.add_argument("--check-only", action="store_true", help="check marks, binaries and links, run nothing")
    ap.add_argument("--only", help="check and run only the pages whose path contains this")
    ap.add_argument("--keep-going", action="store_true", help="run the blocks even when a check failed")
    ap.add_argument("--self-test", action="store_true", help="prove the checker fails on each defect")
    a = ap.parse_args()
    if a.self_test:
        return self_test()

    todo = [p for p in pages() if not a.only or a.only in p]
    blocks, probs = check_pages(todo)
    shell = [b for b in blocks if b.mode in ("runnable", "not-runnable")]
    if a.list:
        for b in shell:
            print(f"{b.where():28} {b.mode:12} {b.reason}")
    for p in probs:
        print("FAIL [docs.commands]: " + p, file=sys.stderr)
    nrun = sum(b.mode == "runnable" for b in shell)
    print(f"docs.commands: {len(todo)} pages, {len(shell)} shell blocks: {nrun} runnable, "
          f"{len(shell) - nrun} not runnable (with a reason); {len(probs)} problem(s)")
    if a.list or a.check_only or (probs and not a.keep_going):
        return 1 if probs else 0
    if not os.path.isfile(os.path.join(BIN, "step_bench")):
        print(f"FAIL [docs.commands]: no binaries in {BIN} (build first)", file=sys.stderr)
        return 1

    before = repo_snapshot()
    work = tempfile.mkdtemp(prefix="mb-docs.")
    os.chmod(work, 0o755)  # munged (user munge) must reach its socket in the private Slurm's folder
    env = block_env(work)
    logdir = os.path.join(work, "logs")
    os.makedirs(logdir)
    t_all = time.monotonic()
    try:
        # One tree for every page, as a reader pasting the pages in order has.
        root = make_root(work, "root")
        env["MB_SRC"] = root  # tests and scripts a block runs see the copy as their tree
        failed, skipped, nrun, writes = run_blocks([b for b in shell if b.mode == "runnable"], root, env, logdir)
        for w in writes:
            print("FAIL [docs.commands]: " + w, file=sys.stderr)
        after = repo_snapshot()
        if before is not None and after is not None and after - before:
            for l in sorted(after - before):
                print(f"FAIL [docs.commands]: a block wrote into the repository: {l}", file=sys.stderr)
            failed.append(None)
    finally:
        if os.path.isdir(env["MB_SLURM_DIR"]):  # a block that failed before its `slurm-local stop`
            subprocess.run([os.path.join(SRC, "scripts", "slurm-local"), "stop", env["MB_SLURM_DIR"]],
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if os.environ.get("KEEP"):
            print(f"docs.commands: kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"docs.commands: {nrun} blocks run in {time.monotonic() - t_all:.0f} s, "
          f"{len([f for f in failed if f])} failed, {len(skipped)} skipped, "
          f"{len(writes)} write(s) outside results/ or into another page's results")
    return 1 if failed or probs or writes else 0


if __name__ == "__main__":
    sys.exit(main())
