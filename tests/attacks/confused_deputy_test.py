#!/usr/bin/python3
"""By-path calls to ckptscand never lend the daemon's rights to a caller.

ScanPath and ConvertPath read and write with the daemon's rights. Over a unix socket that other
users may open, a uid that cannot read a file inside a root would get its full report, and
ConvertPath with replace would overwrite another user's file with a daemon-signed output. Each
case runs the real CLI as another uid against a real daemon (run as root, as the attack needs a
daemon with more rights than its caller):
  - a 0600 file of root's inside a root: by-path scan refused (PERMISSION_DENIED), no report;
  - a directory of the victim's that the caller cannot write: by-path convert --force refused,
    the victim's file unchanged;
  - the same caller's upload of a file it can read is served (uploads carry the caller's bytes);
  - root's own by-path scan is served (the daemon's uid and root are trusted by default);
  - with --path-uid for the caller, the operator's explicit grant, the by-path scan is served.
Then the start-up checks: a root that contains the state directory, the spool, the signing key
or the socket, a state directory others can write, and an untyped --admin-identity are refused.

Needs root (to act as another user); exits with --skip-exit (77 for ctest) and the reason
otherwise. Stdlib only.

Usage: confused_deputy_test.py --ckptscan PATH --ckptscand PATH --fixture FILE [--skip-exit N]
"""
import argparse
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time

from attack_lib import ReadableCopy, as_uid, cannot_switch_to, check, summary

CALLER, VICTIM = 65530, 65529  # ours alone (other attack tests use 65531, 65532, 65534)

class Daemon:
    def __init__(self, binary, directory, *flags):
        os.makedirs(directory, exist_ok=True)
        self.socket = os.path.join(directory, "s.sock")
        self.log = os.path.join(directory, "log")
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [binary, "--socket", self.socket, "--socket-mode", "0666", "--state-dir",
                 os.path.join(directory, "state"), "--max-running", "1", *flags],
                stderr=log, stdout=subprocess.DEVNULL)
        deadline = time.time() + 30
        while time.time() < deadline:
            with open(self.log, "rb") as f:
                if b'"event":"listening"' in f.read():
                    return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        with open(self.log, "rb") as f:
            raise RuntimeError("ckptscand did not start: " + f.read().decode(errors="replace"))

    def stop(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def cli(binary, uid, *args):
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}
    p = subprocess.run([binary, *args], env=env, preexec_fn=as_uid(uid), capture_output=True,
                       timeout=120)
    return p.returncode, p.stdout.decode(errors="replace") + p.stderr.decode(errors="replace")


def refused_at_start(binary, directory, *flags):
    """Runs ckptscand with `flags`; returns (refused, stderr)."""
    os.makedirs(directory, exist_ok=True)
    try:
        p = subprocess.run([binary, "--socket", os.path.join(directory, "s.sock"), *flags],
                           capture_output=True, timeout=20)
    except subprocess.TimeoutExpired:  # it started and served (run() killed it)
        return False, "the daemon started and served for 20 s"
    return p.returncode == 1, p.stderr.decode(errors="replace")


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckptscan", required=True)
    ap.add_argument("--ckptscand", required=True)
    ap.add_argument("--fixture", required=True)
    ap.add_argument("--skip-exit", type=int, default=77)
    a = ap.parse_args()
    reason = cannot_switch_to(CALLER)
    if reason:
        print("SKIPPED: %s" % reason)
        return a.skip_exit

    # Everything happens in a folder the caller can enter, and the binaries are copied there
    # (tests/lib/other_uid.py): the build tree may sit in a home directory no other uid can.
    copy = ReadableCopy("deputy-")
    tmp = copy.dir
    daemons = []
    try:
        worker = os.path.join(os.path.dirname(os.path.realpath(a.ckptscan)), "ckptscan-worker")
        ckptscan = copy.add(a.ckptscan, "bin/" + os.path.basename(a.ckptscan))
        ckptscand = copy.add(a.ckptscand, "bin/" + os.path.basename(a.ckptscand))
        copy.add(worker, "bin/ckptscan-worker")
        unreadable = copy.unreadable_by(CALLER)
        check(unreadable is None, "the caller can run its copies of the binaries", str(unreadable))
        root = os.path.join(tmp, "root")
        models = os.path.join(root, "models")
        victim_dir = os.path.join(root, "victim")
        os.makedirs(models)
        os.makedirs(victim_dir)
        secret = os.path.join(models, "secret.pt")
        shared = os.path.join(models, "shared.pt")
        for path, mode in ((secret, 0o600), (shared, 0o644)):
            shutil.copy(a.fixture, path)
            os.chmod(path, mode)
        victim_file = os.path.join(victim_dir, "model.safetensors")
        with open(victim_file, "wb") as f:
            f.write(b"the victim's own file\n")
        os.chown(victim_file, VICTIM, VICTIM)
        os.chown(victim_dir, VICTIM, VICTIM)
        os.chmod(victim_dir, 0o755)
        before = sha256(victim_file)

        d = Daemon(ckptscand, os.path.join(tmp, "d"), "--root", root)
        daemons.append(d)
        server = "unix:" + d.socket

        rc, out = cli(ckptscan, CALLER, "scan", "--server", server, "--by-path", secret)
        check(rc == 2 and "PERMISSION_DENIED" in out and "--path-uid" in out and "secret.pt: SAFE" not in out,
              "a by-path scan of a file the caller cannot read is refused, without a report",
              "exit %d: %s" % (rc, out[-400:]))
        rc, out = cli(ckptscan, CALLER, "convert", "--server", server, "--by-path", "--force",
                      shared, "-o", victim_file)
        check(rc == 2 and "PERMISSION_DENIED" in out,
              "a by-path convert --force into another user's directory is refused",
              "exit %d: %s" % (rc, out[-400:]))
        check(sha256(victim_file) == before and os.stat(victim_file).st_uid == VICTIM,
              "the victim's file is unchanged")
        check(not os.path.exists(victim_file + ".sig"), "no signature appeared beside it")
        rc, out = cli(ckptscan, CALLER, "scan", "--server", server, shared)
        check(rc == 0 and "SAFE" in out, "the caller's upload of a file it can read is served",
              "exit %d: %s" % (rc, out[-400:]))
        rc, out = cli(ckptscan, 0, "scan", "--server", server, "--by-path", secret)
        check(rc == 0 and "SAFE" in out, "root's by-path scan is served",
              "exit %d: %s" % (rc, out[-400:]))
        with open(d.log, "rb") as f:
            log = f.read().decode(errors="replace")
        check('"caller":"uid:%d"' % CALLER in log and "may not name paths" in log,
              "the refusal is logged with the caller's uid")
        d.stop()
        daemons.remove(d)

        g = Daemon(ckptscand, os.path.join(tmp, "g"), "--root", root, "--path-uid", str(CALLER))
        daemons.append(g)
        rc, out = cli(ckptscan, CALLER, "scan", "--server", "unix:" + g.socket, "--by-path", secret)
        check(rc == 0 and "SAFE" in out, "--path-uid grants by-path calls to that uid",
              "exit %d: %s" % (rc, out[-400:]))
        g.stop()
        daemons.remove(g)

        # Start-up: what the daemon keeps for itself never lies beneath a root.
        inner = os.path.join(tmp, "inner")
        os.makedirs(os.path.join(inner, "models"))
        shutil.copy(os.path.join(tmp, "d", "state", "signing-key.pem"), os.path.join(inner, "key.pem"))
        os.chmod(os.path.join(inner, "key.pem"), 0o600)
        cases = [
            ("the state directory", ["--state-dir", os.path.join(inner, "state"), "--root", inner]),
            ("the spool directory", ["--state-dir", os.path.join(tmp, "s1"), "--spool-dir",
                                     os.path.join(inner, "spool"), "--root", inner]),
            ("the signing key", ["--state-dir", os.path.join(tmp, "s2"), "--signing-key",
                                 os.path.join(inner, "key.pem"), "--root", inner]),
            ("the state directory", ["--state-dir", os.path.join(tmp, "s3"), "--root",
                                     os.path.join(tmp, "s3", "models")]),
        ]
        os.makedirs(os.path.join(tmp, "s3", "models"), exist_ok=True)
        os.chmod(os.path.join(tmp, "s3"), 0o700)
        for what, flags in cases:
            refused, err = refused_at_start(ckptscand, os.path.join(tmp, "x"), *flags)
            check(refused and what in err and "root" in err,
                  "a root that holds or lies inside %s is refused at start" % what, err[-300:])
        # The key named through a symbolic link outside the roots, or with a second hard link.
        linkdir = os.path.join(tmp, "links")
        os.mkdir(linkdir)
        os.symlink(os.path.join(inner, "key.pem"), os.path.join(linkdir, "key.pem"))
        refused, err = refused_at_start(ckptscand, os.path.join(tmp, "x"), "--state-dir",
                                        os.path.join(tmp, "s6"), "--signing-key",
                                        os.path.join(linkdir, "key.pem"), "--root", inner)
        check(refused and "the signing key" in err and "contains" in err,
              "a key named through a symbolic link into a root is refused at start", err[-300:])
        apart = os.path.join(tmp, "apart")
        os.mkdir(apart)
        shutil.copy(os.path.join(inner, "key.pem"), os.path.join(apart, "key.pem"))
        os.chmod(os.path.join(apart, "key.pem"), 0o600)
        os.link(os.path.join(apart, "key.pem"), os.path.join(inner, "models", "key-link.pem"))
        refused, err = refused_at_start(ckptscand, os.path.join(tmp, "x"), "--state-dir",
                                        os.path.join(tmp, "s7"), "--signing-key",
                                        os.path.join(apart, "key.pem"), "--root", inner)
        check(refused and "hard links" in err, "a key with a second hard link is refused at start",
              err[-300:])
        # A bind mount beneath a root that shows the state directory: no ".." leads from one to
        # the other, so only the mount table tells. In a private mount namespace of its own.
        state8 = os.path.join(tmp, "s8")
        os.makedirs(state8, mode=0o700)
        bind_root = os.path.join(tmp, "bindroot")
        os.makedirs(os.path.join(bind_root, "bm"))
        script = ('mount --bind "$1" "$2/bm" || exit 99; exec "$3" --socket "$4" --state-dir "$1" '
                  '--root "$2"')
        try:
            p = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script,
                                "sh", state8, bind_root, ckptscand,
                                os.path.join(tmp, "x", "s8.sock")],
                               capture_output=True, timeout=20)
        except subprocess.TimeoutExpired as e:
            p = subprocess.CompletedProcess(e.cmd, 0, b"", b"the daemon started and served")
        err = p.stderr.decode(errors="replace")
        if p.returncode == 99 or err.lstrip().startswith("unshare:"):
            print("SKIPPED (bind mount case): cannot make a private mount namespace here: " +
                  err[-200:])
        else:
            check(p.returncode == 1 and "through the mount at" in err,
                  "a root that shows the state directory through a bind mount is refused at start",
                  "exit %d: %s" % (p.returncode, err[-300:]))
        sock_in_root = os.path.join(inner, "s.sock")
        p = subprocess.run([ckptscand, "--socket", sock_in_root, "--state-dir",
                            os.path.join(tmp, "s4"), "--root", inner],
                           capture_output=True, timeout=60)
        err = p.stderr.decode(errors="replace")
        check(p.returncode == 1 and "the socket" in err, "a root that holds the socket is refused",
              err[-300:])
        open_state = os.path.join(tmp, "open-state")
        os.mkdir(open_state)
        os.chmod(open_state, 0o777)
        refused, err = refused_at_start(ckptscand, os.path.join(tmp, "y"), "--state-dir",
                                        open_state)
        check(refused and "writable by its group or by others" in err,
              "a state directory others can write is refused", err[-300:])
        refused, err = refused_at_start(ckptscand, os.path.join(tmp, "z"), "--state-dir",
                                        os.path.join(tmp, "s5"), "--admin-identity", "ops-admin")
        check(refused and "needs its type" in err, "an untyped --admin-identity is refused",
              err[-300:])
    finally:
        for d in daemons:
            d.stop()
        copy.remove()
    return summary()


if __name__ == "__main__":
    sys.exit(main())
