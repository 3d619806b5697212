#!/usr/bin/env python3
"""Checks that the CMake and Bazel builds define the same targets (docs/bazel.md).

CMake side: every add_library, add_executable, add_test(NAME ...) and ckpt_test(...) in every
CMakeLists.txt, with calls to functions defined in those files (ckpt_test, ckpt_verdict_tests, ...)
expanded by substituting their arguments into the names they create.
Bazel side: every `name = "..."` of a cc_library, cc_binary, cc_test, sh_test, py_test,
ckpt_test, ckpt_sh_test or ckpt_py_test in every BUILD.bazel (helper rules such as genrule, filegroup and
package_group have no CMake counterpart and are not compared; third_party/ wraps the system
libraries and is skipped).

Names are compared as multisets, so a name used twice in CMake (convert_test: a gtest binary in
core/convert and a script test in clients) needs two Bazel twins. A name in only one build fails
the check, unless it is in EXCEPTIONS below with its reason. Also checked: the CLI's version
(CKPT_VERSION in clients/BUILD.bazel) equals the CMake project version.

    python3 scripts/check_build_parity.py [SOURCE_ROOT]        exit 0: in parity, 1: not
"""
import collections
import os
import re
import sys

# Targets that cannot have a twin, each with the reason. Keep this list short.
EXCEPTIONS = {
    # CMake-only.
    "install_layout_test": "runs `cmake --install` on the CMake build tree and checks the installed "
                           "layout; Bazel has no install step (cmake/install.cmake)",
    "deb_package_test": "runs cpack on the CMake build tree's CPackConfig.cmake (cmake/package.cmake) "
                        "and checks the Debian package; Bazel has no install or package step",
    "k8s_manifests_test": "renders with the system's kubectl and validates with npm packages from "
                          "the user's cache (scripts/setup.sh --k8s), both outside Bazel's "
                          "declared inputs, and skips (exit 77) where they are absent, for which "
                          "Bazel has no code",
    "tsan_shim_test": "exists only in the ThreadSanitizer tree (CKPT_TSAN, scripts/ci_tsan.sh): it "
                      "checks tests/tsan/absl_mutex_tsan.cc, which only that tree links, and "
                      "needs TSan's exit code; the Bazel build has no TSan configuration",
}

CMAKE_COMMANDS = ("add_library", "add_executable", "add_test")
BAZEL_RULES = ("cc_library", "cc_binary", "cc_test", "sh_test", "py_test", "ckpt_test",
               "ckpt_sh_test", "ckpt_py_test")
SKIP_DIRS = {".git", "third_party", "node_modules"}


def walk(root, filename):
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        dirnames[:] = sorted(d for d in dirnames
                             if d not in SKIP_DIRS and not d.startswith(("build", "bazel-"))
                             and not (rel == "." and d == "build"))
        if filename in filenames:
            yield os.path.join(dirpath, filename)


def strip_cmake_comments(text):
    return "\n".join(re.sub(r"(^|\s)#.*$", "", line) for line in text.splitlines())


def cmake_calls(text):
    """Yields (command, [args]) for each command call; arguments split on whitespace."""
    text = strip_cmake_comments(text)
    for m in re.finditer(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*\(", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        body = text[m.end():i - 1]
        yield m.group(1).lower(), re.findall(r'"[^"]*"|[^\s()]+', body)


def created_names(command, args):
    """Target/test names a built-in command creates, possibly with ${var} references."""
    if command in ("add_library", "add_executable") and args:
        return [args[0]]
    if command == "add_test" and len(args) >= 2 and args[0] == "NAME":
        return [args[1]]
    return []


def cmake_targets(root):
    files = list(walk(root, "CMakeLists.txt"))
    # Included CMake files (cmake/install.cmake registers tests too).
    cmake_dir = os.path.join(root, "cmake")
    if os.path.isdir(cmake_dir):
        files += sorted(os.path.join(cmake_dir, f) for f in os.listdir(cmake_dir)
                        if f.endswith(".cmake"))
    texts = {f: open(f).read() for f in files}
    # function(name params...) ... endfunction(): which names does each create, in terms of
    # its parameters?
    functions = {}
    for text in texts.values():
        for m in re.finditer(r"function\s*\(\s*(\w+)([^)]*)\)(.*?)endfunction",
                             strip_cmake_comments(text), re.S):
            params = m.group(2).split()
            made = []
            for command, args in cmake_calls(m.group(3)):
                made += created_names(command, args)
            functions[m.group(1).lower()] = (params, made)
    names = collections.Counter()
    unresolved = []
    for f, text in sorted(texts.items()):
        body = re.sub(r"function\s*\(.*?endfunction\s*\(\s*\)", "", strip_cmake_comments(text),
                      flags=re.S)
        for command, args in cmake_calls(body):
            made = created_names(command, args)
            if command in functions:
                params, templates = functions[command]
                values = dict(zip(params, args))
                made = [re.sub(r"\$\{(\w+)\}", lambda v: values.get(v.group(1), v.group(0)), t)
                        for t in templates]
            for name in made:
                if "${" in name or "$<" in name:
                    unresolved.append("%s: %s" % (os.path.relpath(f, root), name))
                else:
                    names[name] += 1
    return names, unresolved


def bazel_targets(root):
    names = collections.Counter()
    rule_re = re.compile(r"^(%s)\(\s*\n?\s*name\s*=\s*\"([^\"]+)\"" % "|".join(BAZEL_RULES),
                         re.M)
    for f in walk(root, "BUILD.bazel"):
        text = open(f).read()
        for m in rule_re.finditer(text):
            names[m.group(2)] += 1
        # A rule whose name is not its first attribute would be missed: refuse it.
        for m in re.finditer(r"^(%s)\(" % "|".join(BAZEL_RULES), text, re.M):
            if not rule_re.match(text, m.start()):
                raise SystemExit("%s: put name = first in the %s at offset %d" %
                                 (os.path.relpath(f, root), m.group(1), m.start()))
    return names


def check_version(root):
    cmake = open(os.path.join(root, "CMakeLists.txt")).read()
    want = re.search(r"project\(\s*\w+\s+VERSION\s+([\d.]+)", cmake)
    build = os.path.join(root, "clients", "BUILD.bazel")
    got = re.search(r'CKPT_VERSION=\\\\"([^\\]+)\\\\"', open(build).read()) if os.path.exists(
        build) else None
    if not want or not got:
        return ["cannot find the project version (CMakeLists.txt) or CKPT_VERSION "
                "(clients/BUILD.bazel)"]
    if want.group(1) != got.group(1):
        return ["version differs: CMake project %s, clients/BUILD.bazel CKPT_VERSION %s" %
                (want.group(1), got.group(1))]
    return []


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    cmake, unresolved = cmake_targets(root)
    bazel = bazel_targets(root)
    problems = ["cannot resolve a CMake target name: " + u for u in unresolved]
    for name in sorted(set(cmake) | set(bazel)):
        c, b = cmake[name], bazel[name]
        if c == b:
            if name in EXCEPTIONS:
                problems.append("%s: listed as an exception but present in both builds "
                                "(remove it from EXCEPTIONS)" % name)
            continue
        if name in EXCEPTIONS and (c == 0 or b == 0):
            continue
        if b == 0:
            problems.append("%s: a CMake target without a Bazel twin" % name)
        elif c == 0:
            problems.append("%s: a Bazel target without a CMake twin" % name)
        else:
            problems.append("%s: %d CMake target(s)/test(s) but %d Bazel ones" % (name, c, b))
    for name in sorted(EXCEPTIONS):
        if cmake[name] == 0 and bazel[name] == 0:
            problems.append("%s: listed as an exception but defined nowhere" % name)
    problems += check_version(root)
    print("build parity: %d CMake names, %d Bazel names, %d exceptions" %
          (sum(cmake.values()), sum(bazel.values()), len(EXCEPTIONS)))
    for p in problems:
        print("  " + p)
    if problems:
        print("build parity: FAILED (%d problems); see docs/bazel.md" % len(problems))
        return 1
    print("build parity: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
