#!/usr/bin/env python3
"""The Dockerfile, checked statically (no image is built: CI has no Docker daemon).

    docker_files_test.py --source DIR --ckptscand BIN

Checks: every stage is FROM debian:bookworm-slim; the build stage runs scripts/setup.sh and the
CMake build and `cmake --install`; the runtime stage copies exactly the binaries that
cmake/install.cmake installs, into one directory (the worker beside the others), from the
install; the runtime apt packages cover every shared library `ldd ckptscand` needs (mapped to
Debian packages with dpkg -S); the final USER is a non-root numeric uid, the one the Kubernetes
Deployment runs as; EXPOSE lists exactly the ports the entrypoint passes to ckptscand and the
Deployment's container ports; every flag the entrypoint passes is a ckptscand flag; and the
entrypoint, run with a stand-in daemon, builds the command lines it documents.
"""
import argparse
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

failures = []


def check(ok, what):
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what)
    return ok


def instructions(text):
    """[(INSTRUCTION, args)] with continuations joined and comments dropped."""
    out, cur = [], ""
    for line in text.splitlines():
        if not cur and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.lstrip().startswith("#"):
            continue
        cur += line.rstrip()
        if cur.endswith("\\"):
            cur = cur[:-1] + " "
            continue
        word, _, rest = cur.strip().partition(" ")
        out.append((word.upper(), " ".join(rest.split())))
        cur = ""
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--ckptscand", required=True)
    args = ap.parse_args()
    src = Path(args.source)
    ins = instructions((src / "Dockerfile").read_text())

    stages, cur = [], None
    for word, rest in ins:
        if word == "FROM":
            cur = {"from": rest, "ins": []}
            stages.append(cur)
        elif cur is not None:
            cur["ins"].append((word, rest))
    check(len(stages) >= 2, f"multi-stage ({len(stages)} stages)")
    for s in stages:
        check(re.fullmatch(r"debian:bookworm-slim( AS \w+)?", s["from"], re.I) is not None,
              f"FROM {s['from']} is debian:bookworm-slim")
    build, runtime = stages[0], stages[-1]
    build_runs = " && ".join(r for w, r in build["ins"] if w == "RUN")
    check(any(w == "COPY" and "scripts/setup.sh" in r for w, r in build["ins"]) and
          re.search(r"(^|&& |\s)scripts/setup\.sh(\s|$)", build_runs) is not None,
          "the build stage runs scripts/setup.sh (the new user's setup)")
    check("cmake -S" in build_runs and "cmake --build" in build_runs and "cmake --install" in build_runs,
          "the build stage configures, builds and runs cmake --install")
    m = re.search(r"DESTDIR=(\S+) cmake --install \S+ --prefix (\S+)", build_runs)
    check(m is not None, "cmake --install with DESTDIR and --prefix")
    root = (m.group(1) + m.group(2)) if m else "/install/usr/local"

    # The binaries: exactly what install(TARGETS) lays out, into one directory.
    install_cmake = (src / "cmake/install.cmake").read_text()
    tm = re.search(r"install\(TARGETS ([\w\- ]+?) RUNTIME DESTINATION (\w+)\)", install_cmake)
    installed = set(tm.group(1).split()) if tm else set()
    bindir = tm.group(2) if tm else "bin"
    check(installed == {"ckptscan", "ckptscand", "ckptscan-worker"},
          f"cmake/install.cmake installs the three binaries ({sorted(installed)})")
    copied, dests = set(), set()
    for w, r in runtime["ins"]:
        if w == "COPY" and r.startswith("--from="):
            parts = r.split()[1:]
            for p in parts[:-1]:
                if p.startswith(f"{root}/{bindir}/"):
                    copied.add(p.rsplit("/", 1)[1])
                    dests.add(parts[-1])
    check(copied == installed, f"the runtime copies the installed binaries {sorted(copied)} from {root}/{bindir}")
    check(dests == {"/usr/local/bin/"}, f"side by side in /usr/local/bin/ ({sorted(dests)})")
    runtime_copies = " ".join(r for w, r in runtime["ins"] if w == "COPY")
    check(f"{root}/share/ckptscan/" in runtime_copies, "the runtime copies the installed rules")

    # Runtime packages cover ckptscand's shared libraries.
    rt_runs = " ".join(r for w, r in runtime["ins"] if w == "RUN")
    pkgs = set(re.findall(r"\b(lib[\w.+-]+|zlib1g)\b", rt_runs))
    check(not any(p.endswith("-dev") for p in pkgs), f"no -dev package in the runtime ({sorted(pkgs)})")
    if shutil.which("ldd") and shutil.which("dpkg"):
        ldd = subprocess.run(["ldd", args.ckptscand], capture_output=True, text=True)
        libs = [os.path.realpath(l.split("=>")[1].split()[0]) for l in ldd.stdout.splitlines()
                if "=>" in l and "/" in l.split("=>")[1]]
        # One dpkg -S for all (Debian's merged /usr: the package lists /lib/... or /usr/lib/...).
        cands = sorted({c for lib in libs for c in (lib, lib.replace("/usr/lib/", "/lib/", 1))})
        r = subprocess.run(["dpkg", "-S", *cands], capture_output=True, text=True)
        owner = {}
        for line in r.stdout.splitlines():
            pkg, _, path = line.partition(": ")
            owner[path.strip()] = pkg.split(":")[0]
        needed = set()
        for lib in libs:
            pkg = owner.get(lib) or owner.get(lib.replace("/usr/lib/", "/lib/", 1))
            if pkg is None:
                check(False, f"dpkg -S finds the package of {lib}")
            else:
                needed.add(pkg)
        needed -= {"libc6", "libgcc-s1"}  # in every Debian image (essential)
        check(needed <= pkgs, f"runtime packages cover ldd ckptscand: {sorted(needed)} "
              f"(missing: {sorted(needed - pkgs)})")
    else:
        print("note: ldd or dpkg missing: the runtime package list is not checked against ldd")

    # USER: non-root, numeric, the Deployment's uid.
    users = [r for w, r in runtime["ins"] if w == "USER"]
    uid = users[-1].split(":")[0] if users else "root"
    check(uid.isdigit() and int(uid) != 0,
          f"the runtime's USER is a numeric non-root uid ({uid}; runAsNonRoot needs a number)")
    dep = (src / "deploy/kubernetes/base/deployment.yaml").read_text()
    ru = re.search(r"runAsUser: (\d+)", dep)
    check(ru is not None and ru.group(1) == uid, f"the Deployment runs as the image's uid {uid}")
    check(f"--uid {uid}" in rt_runs, "the image creates that user")

    # Entrypoint, ports, flags.
    ep = [r for w, r in runtime["ins"] if w == "ENTRYPOINT"]
    check(len(ep) == 1 and "/usr/local/lib/ckptscan/entrypoint.sh" in ep[0], "ENTRYPOINT is entrypoint.sh")
    entry = src / "deploy/docker/entrypoint.sh"
    check(f"COPY deploy/docker/entrypoint.sh /usr/local/lib/ckptscan/entrypoint.sh" in
          " ".join(f"{w} {r}" for w, r in runtime["ins"]), "the entrypoint is copied in")
    check(entry.stat().st_mode & stat.S_IXUSR != 0, "entrypoint.sh is executable")
    etext = entry.read_text()
    exposed = {int(p.split("/")[0]) for w, r in runtime["ins"] if w == "EXPOSE" for p in r.split()}
    ports = {int(p) for p in re.findall(r"--(?:tcp|health-tcp) 0\.0\.0\.0:(\d+)", etext)}
    check(exposed == ports and len(ports) == 2, f"EXPOSE {sorted(exposed)} = the entrypoint's listen ports {sorted(ports)}")
    # The metrics port is the Kubernetes config's choice (metrics-port), not the image's default.
    cports = {int(p) for n, p in re.findall(r"- name: (\w+)\s+containerPort: (\d+)", dep)
              if n != "metrics"}
    check(cports == exposed, f"the Deployment's gRPC and health container ports {sorted(cports)} = EXPOSE")
    help_out = subprocess.run([args.ckptscand, "--help"], capture_output=True, text=True).stdout
    flags = set(re.findall(r"^\s+(?:-\w,)?--([a-z][a-z0-9-]*)", help_out, re.M))
    used = set(re.findall(r"set -- (--[a-z-]+)", etext)) | set(re.findall(r"\s(--(?:tls-cert|tls-key))\s", etext))
    for f in sorted(used):
        check(f[2:] in flags, f"entrypoint flag {f} is a ckptscand flag")

    # The entrypoint, run with a stand-in daemon that prints its arguments.
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        fake = t / "ckptscand"
        fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
        fake.chmod(0o755)
        script = t / "entrypoint.sh"
        script.write_text(etext.replace("daemon=/usr/local/bin/ckptscand", f"daemon={fake}"))
        tls = t / "tls"
        tls.mkdir()

        def run(*argv, env_extra=None):
            env = dict(os.environ, CKPT_TLS_DIR=str(tls), CKPT_SIGNING_KEY=str(t / "key.pem"))
            r = subprocess.run(["sh", str(script), *argv], capture_output=True, text=True, env=env)
            return r.returncode, r.stdout.split("\n")[:-1]

        rc, a = run()
        check(rc == 0 and a == ["--health-tcp", "0.0.0.0:8081", "--state-dir", "/var/lib/ckptscan",
                                "--socket", "/run/ckptscan/ckptscand.sock"],
              f"entrypoint without TLS: socket, state, health only ({a})")
        (tls / "tls.crt").write_text("x")
        (tls / "tls.key").write_text("x")
        rc, a = run("--require-client-cert")
        check(rc == 0 and "--tcp" in a and a[a.index("--tcp") + 1] == "0.0.0.0:8443" and
              "--tls-client-ca" not in a and a[-1] == "--require-client-cert",
              "entrypoint with tls.crt/tls.key: --tcp 0.0.0.0:8443 with them; arguments kept last")
        (tls / "ca.crt").write_text("x")
        (t / "key.pem").write_text("x")
        rc, a = run("--health-tcp", "0.0.0.0:9000", "--socket=/x.sock")
        check(rc == 0 and a.count("--health-tcp") == 1 and "0.0.0.0:9000" in a and
              "--socket" not in a and "--tls-client-ca" in a and "--signing-key" in a,
              f"entrypoint: given flags replace the defaults (never twice); ca.crt and key used ({a})")
        rc, a = run("--no-defaults", "--version")
        check(rc == 0 and a == ["--version"], "entrypoint --no-defaults passes the arguments alone")

    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "info"], capture_output=True, timeout=20).returncode != 0:
        print("note: no usable Docker daemon here; the image itself was not built (static checks only)")

    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("PASS: Dockerfile")
    return 0


if __name__ == "__main__":
    sys.exit(main())
