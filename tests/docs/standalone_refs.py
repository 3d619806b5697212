#!/usr/bin/python3
"""The product stands alone: no user-facing text cites a file that is not in this repository.

    standalone_refs.py REPO

It first checks itself on lines it must and must not flag (a check that cannot fail proves
nothing), then the repository.

User-facing text is the documentation (every *.md), the API's protos, the rules (their
messages and sources become findings), the deployment files, and the string literals of the
C++ and Python sources (messages, --help). In it:
  - a path into this repository (its first folder is one of the repository's top-level
    folders) must exist, as written or relative to the citing file's folder;
  - nothing may point outside it: a relative path that climbs out of the repository, a
    document name (NAME.md) that is no document of ours, or an appendix tag of someone
    else's notes (a capital letter, a dot and a number in parentheses);
  - a section sign must cite a public source on the same line (an RFC, a PEP, a named
    specification) or one of our own documents that exists.
Prints every offending line as FILE:LINE: reason: text and exits 1 if there is any.
Stdlib only.
"""
import os
import re
import subprocess
import sys

TEXT = re.compile(r"\.(md|proto|textproto|yaml|yml)$|(^|/)Dockerfile$")
CODE = re.compile(r"\.(cc|h|py)$")
STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
PATH = re.compile(r"(?<![\w./:-])((?:\.\./)*[A-Za-z0-9_][A-Za-z0-9_.-]*(?:/[A-Za-z0-9_.*-]+)+)")
BARE_DOC = re.compile(r"(?<![\w/.-])([A-Za-z0-9_][\w.-]*\.md)\b")
APPENDIX = re.compile(r"\([A-Z]\.\d+(?:\.\d+)*\)")
DOCS = set()  # the basenames of the repository's documents (*.md), set in main()
SECTION = re.compile(r"§\s*\d")
PUBLIC = re.compile(r"\bRFC\s?\d+|\bPEP\s?\d+|\bspec(ification)?\b|\bPOSIX\b|\bISO\b|\bECMA",
                    re.I)


def tracked_files(repo):
    """git's tracked files; outside a git checkout (an exported tree), every file but build
    trees."""
    try:
        out = subprocess.run(["git", "-C", repo, "ls-files", "-z"], capture_output=True,
                             check=True).stdout.decode()
        return [f for f in out.split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for top, dirs, names in os.walk(repo):
            dirs[:] = [d for d in dirs if not d.startswith((".", "build", "bazel-"))]
            files += [os.path.relpath(os.path.join(top, n), repo) for n in names]
        return files


def exists(repo, citing, path):
    if "*" in path or "{" in path:
        return True  # a pattern, not a file
    for base in (repo, os.path.join(repo, os.path.dirname(citing))):
        if os.path.exists(os.path.normpath(os.path.join(base, path))):
            return True
    return False


def problems(repo, name, line, top):
    for m in APPENDIX.finditer(line):
        yield "cites an appendix of notes outside the repository (%s)" % m.group(0)
    for m in BARE_DOC.finditer(line):
        if m.group(1) not in DOCS:
            yield "cites %s, which is no document of this repository" % m.group(1)
    own_doc = False
    for m in PATH.finditer(line):
        path = m.group(1).rstrip(".,;:)")
        bare = re.sub(r"^(\.\./)+", "", path)
        climbs = os.path.normpath(os.path.join(os.path.dirname(name), path)).startswith("..")
        if climbs and not exists(repo, "", bare):
            yield "cites %s, outside the repository" % path
            continue
        if bare.endswith(".md") and not (exists(repo, name, path) or exists(repo, "", bare)):
            yield "cites %s, which is no document of this repository" % path
            continue
        if bare.split("/")[0] not in top or "." not in bare.rsplit("/", 1)[-1]:
            continue  # an upstream or system path, or a build target (no file name extension)
        if not (exists(repo, name, path) or exists(repo, "", bare)):
            yield "cites %s, which is not in the repository" % path
        elif bare.endswith(".md"):
            own_doc = True
    if SECTION.search(line) and not (PUBLIC.search(line) or own_doc):
        yield "a section sign without a public source or a document of ours on the line"


def self_test(repo):
    """Lines the check must flag, and lines it must let pass, checked against this repository."""
    top = {"docs", "clients", "core", "app"}
    flagged = ["see ../../notes/policy.txt for the policy",
               "see ../notes/reference/policy.md for the policy",
               "the plan (PLAN.md, section 4) says so",
               "rule R2 of §4.3 forbids it",
               "as shown in (B.2), a bypass",
               "documented in docs/nowhere.md",
               "the action's clients/github-action/README.md explains"]
    passing = ["RFC 4648 §4, padded",
               "the OMS spec §8.2 rule",
               "explained in docs/rules.md §5",
               "torch/serialization.py reads it", "/usr/lib/x86_64-linux-gnu/libz.so",
               "the sharded set in tests/fixtures/torch/sharded/pytorch_model.bin.index.json"]
    bad = [line for line in flagged if not list(problems(repo, "docs/x.md", line, top | {"tests"}))]
    bad += [line for line in passing if list(problems(repo, "docs/x.md", line, top | {"tests"}))]
    for line in bad:
        print("self-test: wrong answer for: %s" % line)
    print("standalone_refs self-test: %d of %d lines answered right" %
          (len(flagged) + len(passing) - len(bad), len(flagged) + len(passing)))
    return 1 if bad else 0


def main():
    repo = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    files = tracked_files(repo)
    DOCS.update(os.path.basename(f) for f in files if f.endswith(".md"))
    if self_test(repo) != 0:
        return 1
    top = {f.split("/")[0] for f in files if "/" in f}
    bad = 0
    checked = 0
    for name in files:
        if (name.startswith(("tests/", "third_party/")) or
                re.search(r"_test\.(cc|py)$|(^|/)testing/", name)):
            continue  # tests, their data and vendored text: not what a user reads
        is_text, is_code = TEXT.search(name), CODE.search(name)
        if not (is_text or is_code):
            continue
        with open(os.path.join(repo, name), encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n")
        checked += 1
        for n, line in enumerate(lines, 1):
            texts = [line] if is_text else [m.group(1) for m in STRING.finditer(line)]
            for text in texts:
                for why in problems(repo, name, text, top):
                    print("%s:%d: %s: %s" % (name, n, why, line.strip()[:160]))
                    bad += 1
    print("standalone_refs: %d files read, %d offending lines" % (checked, bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
