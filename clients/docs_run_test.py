#!/usr/bin/python3
"""The commands the README and docs/guide.md show run as printed.

Every fenced block of README.md and docs/guide.md without a language, or marked sh, bash,
shell or console, is read line by line (a trailing backslash, pipe, && or || joins lines, as the
shell does; a `#` comment after the command is dropped). Each line that runs ckptscan, or that prepares for it in a subshell
(`(cd models && ...)`), is run with bash in a fresh folder that holds a small, benign Hugging
Face style model in `models/` and `my-model/` (safetensors, a sharded PyTorch checkpoint and
its index, config, tokenizer files, README.md, .gitattributes), with the built ckptscan first
on PATH. Lines run in order, so a block's later lines see what earlier ones wrote.

A command must exit 0 on that model: every file in it is SAFE, so anything else means the
printed command is wrong (a usage error, 64), or the recipe it belongs to flags files a user
would have (a manifest recipe that leaves README.md unlisted makes it SUSPICIOUS: exit 1).
Lines that need a running daemon, or the README's own set-up and test commands (which are what
CI runs), are listed as not run, with the reason. The test fails if it finds no command at all.

usage: docs_run_test.py --ckptscan PATH --source DIR
"""
import argparse
import json
import os
import pathlib
import shutil
import struct
import subprocess
import sys
import tempfile

DOCS = ("README.md", "docs/guide.md")
SHELL_FENCES = {"", "sh", "bash", "shell", "console"}
# (substring, why a line holding it is not run here)
NOT_RUN = (
    ("scripts/run.sh", "the README's set-up and test commands: CI runs exactly these"),
    ("--server", "needs a running ckptscand (daemon_test, surfaces_test)"),
    ("ckptscan admin", "needs a running ckptscand (daemon_test)"),
    ("ckptscan health", "needs a running ckptscand (daemon_test)"),
    ("ckptscand", "starts the daemon (daemon_test)"),
)


def commands(text):
    """(line number, command) of every shell line in the document's shell fences."""
    out, fence, pending, start = [], None, "", 0
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            fence = None if fence is not None else stripped[3:].strip()
            continue
        if fence not in SHELL_FENCES or not stripped:
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        if stripped.endswith(("|", "&&", "||")):  # the shell reads on, as it would here
            pending += stripped + " "
            continue
        out.append((start, pending + stripped))
        pending = ""
    return out


def drop_comment(command):
    """The command without a trailing `  # comment` (a # inside quotes is kept)."""
    quote = None
    for i, c in enumerate(command):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or command[i - 1] == " "):
            return command[:i].rstrip()
    return command


def runs_ckptscan(command):
    return command.startswith("ckptscan ") or command.startswith("(cd ")


def make_model(source, folder):
    """A benign model folder from the repository's fixtures."""
    repo = source / "tests" / "fixtures" / "repo" / "model"
    folder.mkdir(parents=True)
    # A config without auto_map (the fixture repository's names remote code on purpose).
    (folder / "config.json").write_text(json.dumps(
        {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 2,
         "torch_dtype": "float32"}, indent=2) + "\n")
    for name in ("README.md", "generation_config.json", "tokenizer.json",
                 "tokenizer_config.json", "special_tokens_map.json", "vocab.txt", "merges.txt"):
        shutil.copy(repo / name, folder / name)
    for shard in sorted((repo / "sharded").iterdir()):
        shutil.copy(shard, folder / shard.name)
    # A two-float safetensors file: an 8-byte little-endian header length, the JSON header
    # (padded with spaces to 8 bytes, as the safetensors library writes it), the data.
    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}},
                        separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)
    (folder / "model.safetensors").write_bytes(
        struct.pack("<Q", len(header)) + header + struct.pack("<2f", 1.0, -2.0))
    (folder / ".gitattributes").write_text(
        "*.bin filter=lfs diff=lfs merge=lfs -text\n"
        "*.safetensors filter=lfs diff=lfs merge=lfs -text\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckptscan", required=True)
    ap.add_argument("--source", required=True)
    args = ap.parse_args()
    source = pathlib.Path(args.source).resolve()
    ckptscan = pathlib.Path(args.ckptscan).resolve()
    failures, ran, not_run = [], 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp) / "work"
        bindir = pathlib.Path(tmp) / "bin"
        bindir.mkdir()
        (bindir / "ckptscan").symlink_to(ckptscan)
        env = dict(os.environ, PATH="%s:%s" % (bindir, os.environ.get("PATH", "/usr/bin:/bin")))
        for doc in DOCS:
            # Each document starts from a fresh copy of the model.
            shutil.rmtree(work, ignore_errors=True)
            make_model(source, work / "models")
            make_model(source, work / "my-model")
            for number, raw in commands((source / doc).read_text()):
                command = drop_comment(raw)
                where = "%s:%d" % (doc, number)
                reason = next((why for key, why in NOT_RUN if key in command), None)
                if reason is None and not runs_ckptscan(command):
                    reason = "not a ckptscan command"
                if reason is not None:
                    not_run += 1
                    print("not run: %s: %s (%s)" % (where, command, reason))
                    continue
                p = subprocess.run(["bash", "-c", command], cwd=work, env=env,
                                   capture_output=True, text=True, timeout=300, check=False)
                ran += 1
                if p.returncode != 0:
                    failures.append("%s: `%s` exited %d\n%s%s" % (
                        where, command, p.returncode, p.stdout[-1500:], p.stderr[-1500:]))
                else:
                    print("ok: %s: %s" % (where, command))
    for f in failures:
        print("FAIL:", f)
    print("%d commands run, %d failed, %d not run" % (ran, len(failures), not_run))
    if ran == 0:
        print("FAIL: no command found in", ", ".join(DOCS))
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
