"""meshbench.locks: the advisory fcntl locks the sweep shares with the binaries.

A binary writing -O FILE.h5 holds a write lock (fcntl F_SETLK, the whole file) on FILE.h5.lock
until it ends, with "binary (pid P on host H since T)" written in it
(src/results/output_path.cpp, docs/reliability.md). Python's fcntl.lockf takes the same kind of
lock, so a sweep can ask "is this file being written?" by trying to take it, and while it holds
it no binary can start writing that file. The sweep also locks its own output folder
(<out>/.sweep.lock) for as long as it runs, so a second sweep on that folder is refused.

The protocol is the binaries': open (creating) the lock file, take the lock without waiting,
check that the file locked is still the one on disk (a holder removes it while still holding
the lock, before it closes), write the holder's name; to release, remove the file, then close.
Not here: what a sweep does with a file it may touch (launch.set_aside).
"""
import datetime
import errno
import fcntl
import os


def me(what):
    """The holder text the binaries write: 'WHAT (pid P on host H since T)'."""
    since = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{what} (pid {os.getpid()} on host {os.uname().nodename} since {since})"


def _holder_text(fd):
    try:
        text = os.pread(fd, 512, 0).decode(errors="replace").strip()
    except OSError:
        text = ""
    return text or "another process (it has not written its name yet)"


class Lock:
    """One held lock file; release() removes it (while still locked) and closes it."""

    def __init__(self, path, fd):
        self.path, self.fd = path, fd

    def release(self):
        if self.fd is None:
            return
        try:
            os.unlink(self.path)
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None


def take(path, holder):
    """(Lock, None) when this process now holds `path`, with `holder` written in it, or
    (None, text) when another process holds it: its own words ('step_bench (pid 12 on host n1
    since ...)'). Raises OSError when the lock file cannot be created or locked at all (an
    unwritable folder, a file system without fcntl locks)."""
    for _ in range(8):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            who = _holder_text(fd)
            os.close(fd)
            if e.errno in (errno.EACCES, errno.EAGAIN):
                return None, who
            raise
        try:
            same = os.path.samestat(os.stat(path), os.fstat(fd))
        except FileNotFoundError:
            same = False
        if not same:  # its holder removed it after we opened it: lock the one on disk
            os.close(fd)
            continue
        os.ftruncate(fd, 0)
        os.pwrite(fd, (holder + "\n").encode(), 0)
        return Lock(path, fd), None
    raise OSError(errno.EAGAIN, f"could not take the lock {path} (it kept changing)")


def held_by(path):
    """The holder's text when another process holds the lock file `path`, else None (no file,
    or a file no one holds: left by a process that was killed). Never takes the lock: asks the
    kernel (F_GETLK), so it cannot make a binary starting at that moment fail."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        import struct
        # struct flock on Linux: short l_type, l_whence; off_t l_start, l_len; pid_t l_pid.
        fmt = "hhqqi4x"
        probe = struct.pack(fmt, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        l_type = struct.unpack(fmt, fcntl.fcntl(fd, fcntl.F_GETLK, probe))[0]
        return None if l_type == fcntl.F_UNLCK else _holder_text(fd)
    finally:
        os.close(fd)
