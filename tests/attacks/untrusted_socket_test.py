#!/usr/bin/python3
"""`ckptscan scan --server local` trusts only a daemon socket that another local user cannot
have planted, and neither does the Python client's ScanClient("local").

A non-root user's default socket is /tmp/ckptscan-UID/ckptscand.sock when XDG_RUNTIME_DIR is
unset, and /tmp is writable by everyone: another user can create that directory first and answer
SAFE to every scan. Each case plants a socket the way such a user could, runs the CLI as the
victim, and requires exit 2 with the reason (and the Python client, run as the victim, to raise
ScanClientError PERMISSION_DENIED with the same reason before it sends anything); then a socket the victim really owns passes the
check (the call then fails for want of a real daemon, which is not a refusal).

Needs root (to act as two other users); exits with --skip-exit (77 for ctest) and the reason
otherwise. Stdlib only.

Usage: untrusted_socket_test.py --ckptscan PATH --fixture FILE --client-dir DIR [--skip-exit N]
"""
import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys

from attack_lib import ReadableCopy, as_uid, cannot_switch_to, check, summary

VICTIM, ATTACKER = 65532, 65531  # daemon_test uses 65534; these are ours alone
SOCKET_DIR = "/tmp/ckptscan-%d" % VICTIM
SOCKET = SOCKET_DIR + "/ckptscand.sock"

def serve(listen_uid, chown_socket_to=None):
    """A process that listens on SOCKET as `listen_uid` (binding first as root when the socket
    file is to be chowned) and answers every connection with garbage. Returns its pid."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            if chown_socket_to is None:
                os.setgid(listen_uid)
                os.setuid(listen_uid)
                s.bind(SOCKET)
            else:
                s.bind(SOCKET)
                os.chown(SOCKET, chown_socket_to, chown_socket_to)
                os.setgid(listen_uid)
                os.setuid(listen_uid)
            s.listen(8)  # SO_PEERCRED reports the credentials of this call
            os.write(w, b"1")
            os.close(w)
            s.settimeout(30)
            while True:
                c, _ = s.accept()
                try:
                    c.sendall(b"SAFE SAFE SAFE\n")
                except OSError:
                    pass  # a client that refuses the socket may close before this is sent
                finally:
                    c.close()
        except Exception as e:  # noqa: BLE001
            print("server:", e, file=sys.stderr)
        os._exit(0)
    os.close(w)
    os.read(r, 1)
    os.close(r)
    return pid


def stop(pid):
    if pid:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def reset_dir(owner, mode):
    shutil.rmtree(SOCKET_DIR, ignore_errors=True)
    os.mkdir(SOCKET_DIR)
    os.chown(SOCKET_DIR, owner, owner)
    os.chmod(SOCKET_DIR, mode)


def scan_as_victim(cli, target):
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}  # no XDG_RUNTIME_DIR: the /tmp path
    p = subprocess.run([cli, "scan", "--server", "local", target], env=env,
                       preexec_fn=as_uid(VICTIM), capture_output=True, timeout=60)
    return p.returncode, p.stderr.decode(errors="replace") + p.stdout.decode(errors="replace")


CLIENT_PROBE = """
import sys
sys.path.insert(0, sys.argv[1])
import ckptscan_client
try:
    ckptscan_client.ScanClient("local")
except ckptscan_client.ScanClientError as e:
    print("ScanClientError", e.code, e.details)
    sys.exit(3)
except Exception as e:  # past the socket check: stubs, channel (no real daemon here)
    print("past the check:", type(e).__name__, e)
    sys.exit(4)
print("past the check: a client")
sys.exit(4)
"""


def client_as_victim(client_dir):
    """ScanClient("local") as the victim: (exit code, output); 3 when it raised ScanClientError."""
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}
    p = subprocess.run(["/usr/bin/python3", "-c", CLIENT_PROBE, client_dir], env=env,
                       preexec_fn=as_uid(VICTIM), capture_output=True, timeout=60, cwd="/")
    return p.returncode, p.stdout.decode(errors="replace") + p.stderr.decode(errors="replace")


def both_refuse(cli, client, target, reason, scenario):
    """The CLI exits 2 and the Python client raises PERMISSION_DENIED, each naming `reason`."""
    code, out = scan_as_victim(cli, target)
    check(code == 2 and "refusing" in out and reason in out, scenario + " (CLI: exit 2)",
          "%d %s" % (code, out))
    code, out = client_as_victim(client)
    check(code == 3 and "PERMISSION_DENIED" in out and "refusing" in out and reason in out,
          scenario + " (Python client: PERMISSION_DENIED)", "%d %s" % (code, out))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckptscan", required=True)
    ap.add_argument("--fixture", required=True)
    ap.add_argument("--client-dir", required=True, help="clients/python")
    ap.add_argument("--skip-exit", type=int, default=77)
    a = ap.parse_args()
    why = cannot_switch_to(ATTACKER)
    if why:
        print("SKIPPED: untrusted_socket_test acts as uids %d and %d: %s" % (VICTIM, ATTACKER, why))
        return a.skip_exit

    # The victim runs a copy of the CLI on a copy of the fixture, in a folder it can read
    # (tests/lib/other_uid.py): the checkout may be private.
    work = ReadableCopy("ckpt-sock-")
    cli = work.add(a.ckptscan, "ckptscan")
    target = work.add(a.fixture, "input.pkl")
    client = work.add(a.client_dir, "python")
    server = None
    try:
        unreadable = work.unreadable_by(VICTIM)
        check(unreadable is None, "the victim can run its copy of the CLI and read the fixture",
              str(unreadable))
        reset_dir(ATTACKER, 0o755)
        server = serve(ATTACKER)
        both_refuse(cli, client, target, "owned by uid %d" % ATTACKER,
                    "a socket directory another user made first is refused")
        stop(server)
        server = None

        reset_dir(VICTIM, 0o777)
        server = serve(VICTIM)
        both_refuse(cli, client, target, "writable by its group or by others",
                    "a socket directory others can write is refused")
        stop(server)
        server = None

        reset_dir(VICTIM, 0o700)
        server = serve(ATTACKER, chown_socket_to=VICTIM)
        both_refuse(cli, client, target, "runs as uid %d" % ATTACKER,
                    "a socket the victim owns but another user listens on is refused "
                    "(SO_PEERCRED)")
        stop(server)
        server = None

        # The other user's symlink at the directory's name, to a directory that passes every
        # other check (the victim's, mode 0700, the victim listening): it can be repointed at
        # any time, so the name itself must not be a link.
        real = SOCKET_DIR + ".real"
        reset_dir(VICTIM, 0o700)
        shutil.rmtree(real, ignore_errors=True)
        os.rename(SOCKET_DIR, real)
        os.symlink(real, SOCKET_DIR)
        os.lchown(SOCKET_DIR, ATTACKER, ATTACKER)
        server = serve(VICTIM)
        both_refuse(cli, client, target, "is a symlink",
                    "a symlink at the socket directory's name is refused")
        stop(server)
        server = None
        os.unlink(SOCKET_DIR)
        shutil.rmtree(real, ignore_errors=True)

        reset_dir(VICTIM, 0o700)
        code, out = scan_as_victim(cli, target)
        check(code == 2 and "is ckptscand running?" in out and "refusing" not in out,
              "no socket at all: exit 2, 'is ckptscand running?'", "%d %s" % (code, out))
        code, out = client_as_victim(client)
        check(code == 3 and "UNAVAILABLE" in out and "is ckptscand running?" in out,
              "no socket at all: the Python client raises UNAVAILABLE", "%d %s" % (code, out))

        reset_dir(VICTIM, 0o700)
        server = serve(VICTIM)
        code, out = scan_as_victim(cli, target)
        check(code == 2 and "refusing" not in out,
              "the victim's own socket passes the check (the fake daemon then fails the call)",
              "%d %s" % (code, out))
        code, out = client_as_victim(client)
        check(code == 4 and "refusing" not in out,
              "the victim's own socket passes the Python client's check", "%d %s" % (code, out))
    finally:
        stop(server)
        if os.path.islink(SOCKET_DIR):
            os.unlink(SOCKET_DIR)
        shutil.rmtree(SOCKET_DIR, ignore_errors=True)
        shutil.rmtree(SOCKET_DIR + ".real", ignore_errors=True)
        work.remove()
    return summary()


if __name__ == "__main__":
    sys.exit(main())
