"""What a test that acts as another uid shares: copies of what that uid runs, reads or imports,
in a fresh temporary folder it can enter, and the switch itself.

A checkout (and the build tree in it) may sit where no other uid can enter: a home directory
of mode 0700, as on a developer's machine or in scripts/fresh_root_check.sh. A test that runs
the CLI, imports the Python client or reads a fixture as another uid must therefore never name
a path in the checkout to that uid; it names the copy instead:

    with ReadableCopy("deputy-") as copy:
        cli = copy.add(args.ckptscan)                    # a file: copied, its mode kept
        copy.add(worker)                                 # beside it, as the CLI expects
        client = copy.add(args.client_dir, "python")     # a folder: copied whole
        reason = copy.unreadable_by(65530)               # None when that uid can read all
        subprocess.run([cli, ...], preexec_fn=as_uid(65530), cwd=copy.dir)

The folder is made where every uid can reach it (the system's temporary folder when each of its
ancestors lets others pass, else /tmp), is mode 0755 with copies of mode 0644 (0755 when the
source is executable), and is removed on exit. Stdlib only.

From a shell (daemon/daemon_test.sh):

    dir=$(python3 tests/lib/other_uid.py --uid 65534 FILE...)   # prints the folder; the
                                                                # caller removes it
"""
import argparse
import os
import shutil
import stat
import sys
import tempfile


def become(uid):
    """Drops this process to `uid` (its own group, no supplementary groups). Root only."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def as_uid(uid):
    """A preexec_fn for subprocess that runs the child as `uid` (as root: unchanged)."""
    return (lambda: become(uid)) if uid != 0 else None


def cannot_switch_to(uid):
    """None when this process can become `uid` (root, and a uid the kernel maps); otherwise the
    reason, for the SKIPPED line."""
    if os.geteuid() != 0:
        return "not root: cannot act as another user"
    pid = os.fork()
    if pid == 0:
        try:
            become(uid)
            os._exit(0)
        except OSError:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return None if os.waitstatus_to_exitcode(status) == 0 else "setuid(%d) fails here" % uid


def _others_can_pass(path):
    """True when every folder from / to `path` lets others search it (mode o+x)."""
    path = os.path.realpath(path)
    while True:
        try:
            if not os.stat(path).st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
        parent = os.path.dirname(path)
        if parent == path:
            return True
        path = parent


def _files_under(path):
    if not os.path.isdir(path):
        yield path
        return
    for root, _, files in os.walk(path):
        for f in files:
            yield os.path.join(root, f)


def _first_unreadable(paths):
    """The first file of `paths` (files or folders) this process cannot read, or run when it is
    executable; None when there is none."""
    for p in paths:
        for q in _files_under(p):
            need = os.R_OK | (os.X_OK if os.stat(q).st_mode & stat.S_IXUSR else 0)
            if not os.access(q, need):
                return q
    return None


def _readable_mode(src_mode):
    return 0o755 if src_mode & stat.S_IXUSR else 0o644


class ReadableCopy:
    """A fresh temporary folder another uid can enter, and copies of files and folders in it."""

    def __init__(self, prefix="ckpt-uid-"):
        parent = tempfile.gettempdir()
        if not _others_can_pass(parent):
            parent = "/tmp"
        self.dir = tempfile.mkdtemp(prefix=prefix, dir=parent)
        os.chmod(self.dir, 0o755)
        self.paths = []

    def add(self, src, name=None):
        """Copies the file or folder `src` (symbolic links followed) into the folder as `name`
        (default: its own name); returns the copy's path. Folders are copied whole, without
        __pycache__; every folder is 0755, every file 0644 or 0755 as its source is
        executable."""
        src = os.path.realpath(src)
        dest = os.path.join(self.dir, name or os.path.basename(src))
        if os.path.isdir(src):
            shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__"))
            os.chmod(dest, 0o755)
            for root, dirs, files in os.walk(dest):
                for d in dirs:
                    os.chmod(os.path.join(root, d), 0o755)
                for f in files:
                    p = os.path.join(root, f)
                    os.chmod(p, _readable_mode(os.stat(p).st_mode))
        else:
            os.makedirs(os.path.dirname(dest), mode=0o755, exist_ok=True)
            shutil.copyfile(src, dest)
            os.chmod(dest, _readable_mode(os.stat(src).st_mode))
        self.paths.append(dest)
        return dest

    def mkdir(self, name, uid=None, mode=0o755):
        """A folder of the copy's own (owned by `uid` when given, e.g. for its writes)."""
        path = os.path.join(self.dir, name)
        os.makedirs(path)
        os.chmod(path, mode)
        if uid is not None:
            os.chown(path, uid, uid)
        return path

    def unreadable_by(self, uid):
        """None when `uid` can read every copy (and run the executable ones); otherwise the
        first path it cannot, for the failure message. Checked in a child that becomes `uid`
        (root only; as any other user, None)."""
        if os.geteuid() != 0 or uid == 0:
            return None
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                become(uid)
                found = _first_unreadable(self.paths)
            except OSError as e:
                found = "(setuid: %s)" % e
            os.write(w, (found or "").encode())
            os._exit(0)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            reason = f.read().decode(errors="replace")
        os.waitpid(pid, 0)
        return reason or None

    def remove(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
        return False


def main():
    ap = argparse.ArgumentParser(description="Copies FILEs into a fresh folder UID can read "
                                 "and prints the folder (the caller removes it).")
    ap.add_argument("--uid", type=int, required=True)
    ap.add_argument("--prefix", default="ckpt-uid-")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    copy = ReadableCopy(args.prefix)
    for f in args.files:
        copy.add(f)
    reason = copy.unreadable_by(args.uid)
    if reason:
        copy.remove()
        print("other_uid: uid %d cannot read %s" % (args.uid, reason), file=sys.stderr)
        return 1
    print(copy.dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
