"""What the attack tests in this directory share: PASS/FAIL lines, the failure list, and
whether this process can act as another uid. Stdlib only."""
import os

failures = []


def check(ok, what, detail=""):
    """Prints PASS or FAIL for `what` (with `detail` on failure) and records a failure."""
    print("%s: %s%s" % ("PASS" if ok else "FAIL", what, "" if ok else " -- " + detail), flush=True)
    if not ok:
        failures.append(what)


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


def summary():
    """The last line and the exit code: 1 if anything failed."""
    if failures:
        print("%d FAILED: %s" % (len(failures), "; ".join(failures)))
        return 1
    print("all passed")
    return 0
