#!/usr/bin/python3
"""Every limit a message names exists as a --limit name.

A limit error prints its name ("[limit max_compression_ratio=200]"); the name comes from a
string literal somewhere in core/, sandbox/ or base/ (at the LimitError call, or passed down to
it). This collects every "max_..." literal of those sources and checks that `ckptscan scan
--help` lists it as a --limit name, so a limit added without a flag fails here. Also: an
unknown name is a usage error (exit 64) that lists the known ones.

usage: limit_names_test.py --ckptscan PATH --source DIR
"""
import argparse
import pathlib
import re
import subprocess
import sys
import tempfile

# Limits of the trusted side, named in messages and set by flags of their own (not worker
# limits, so not --limit names): each flag must be in the help of the command named here (the
# daemon's --max-output-expansion is used by tests/attacks/job_isolation_test.py).
TRUSTED_SIDE = {
    "max_sealed_copy_bytes": ("scan", "--max-sealed-copy-bytes"),
    "max_frame_bytes": ("scan", "--max-frame-bytes"),
    "max_frame_values": ("scan", "--max-frame-values"),
    "max_output_bytes": ("convert", "--max-output-bytes"),
    "max_output_expansion": (None, "ckptscand --max-output-expansion"),
}
LITERAL = re.compile(r'"(max_[a-z0-9_]+)"')


def named_limits(source: pathlib.Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for folder in ("core", "sandbox", "base"):
        for path in sorted((source / folder).rglob("*")):
            if path.suffix not in (".cc", ".h") or path.stem.endswith("_test"):
                continue
            for name in LITERAL.findall(path.read_text(errors="replace")):
                found.setdefault(name, str(path.relative_to(source)))
    return found


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckptscan", required=True)
    ap.add_argument("--source", required=True)
    args = ap.parse_args()
    names = named_limits(pathlib.Path(args.source))
    if len(names) < 40:
        print(f"FAIL: only {len(names)} limit names found under {args.source}")
        return 1
    help_text = subprocess.run([args.ckptscan, "scan", "--help"], capture_output=True,
                               text=True, check=False).stdout
    listed = dict(re.findall(r"^\s+(max_[a-z0-9_]+)\s+default\s+(\d+)\s", help_text, re.M))
    failures = []
    helps = {cmd: subprocess.run([args.ckptscan, cmd, "--help"], capture_output=True,
                                 text=True, check=False).stdout for cmd in ("scan", "convert")}
    for name, (cmd, flag) in sorted(TRUSTED_SIDE.items()):
        if cmd is not None and not re.search(r"^\s+" + re.escape(flag) + r"\b", helps[cmd], re.M):
            failures.append(f"{name}: `ckptscan {cmd} --help` lists no {flag}")
    for name, where in sorted(names.items()):
        if name in TRUSTED_SIDE:
            continue
        if name not in listed:
            failures.append(f"{name} (named in {where}) is not a --limit name")
    # Each name set to its default travels to the worker, which accepts it: a safe pickle
    # stays SAFE (exit 0).
    with tempfile.TemporaryDirectory() as tmp:
        safe = pathlib.Path(tmp) / "safe.pkl"
        safe.write_bytes(b"\x80\x02N.")
        for name, default in sorted(listed.items()):
            probe = subprocess.run([args.ckptscan, "scan", "--limit", f"{name}={default}",
                                    str(safe)], capture_output=True, text=True, check=False)
            if probe.returncode != 0:
                failures.append(f"--limit {name}={default}: exit {probe.returncode} "
                                f"{probe.stdout}{probe.stderr}")
    bad = subprocess.run([args.ckptscan, "scan", "--limit", "max_no_such_limit=1", "/dev/null"],
                         capture_output=True, text=True, check=False)
    if bad.returncode != 64 or "max_compression_ratio" not in bad.stderr:
        failures.append(f"unknown limit: exit {bad.returncode}, stderr {bad.stderr!r}")
    for f in failures:
        print("FAIL:", f)
    print(f"{len(names)} limit names in the sources, {len(listed)} --limit names listed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
