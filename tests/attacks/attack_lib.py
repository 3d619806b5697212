"""What the attack tests in this directory share: PASS/FAIL lines and the failure list; and,
from tests/lib/other_uid.py, acting as another uid with copies of what it runs in a folder it
can read. Stdlib only."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from other_uid import ReadableCopy, as_uid, become, cannot_switch_to  # noqa: E402,F401

failures = []


def check(ok, what, detail=""):
    """Prints PASS or FAIL for `what` (with `detail` on failure) and records a failure."""
    print("%s: %s%s" % ("PASS" if ok else "FAIL", what, "" if ok else " -- " + detail), flush=True)
    if not ok:
        failures.append(what)


def summary():
    """The last line and the exit code: 1 if anything failed."""
    if failures:
        print("%d FAILED: %s" % (len(failures), "; ".join(failures)))
        return 1
    print("all passed")
    return 0
