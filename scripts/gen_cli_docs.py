#!/usr/bin/python3
"""Man pages and shell completions of ckptscan and ckptscand, made from the binaries' own --help.

    gen_cli_docs.py --ckptscan BIN --ckptscand BIN --version V --out DIR

Writes DIR/man1/ckptscan.1.gz, DIR/man8/ckptscand.8.gz (help2man, Debian's help2man package:
the pages say what --help says, so they cannot drift from it; compressed as Debian's policy
asks, with no name or time in the gzip header, so a rebuild gives the same bytes), DIR/bash-completion/ckptscan and
DIR/bash-completion/ckptscand, DIR/zsh/_ckptscan and DIR/zsh/_ckptscand.

The command tree is read by running `BIN [COMMAND...] --help` and reading CLI11's layout: a
"Subcommands:" block lists the commands below, an "Options:" block the flags (a line starting
with blanks and a dash; the names end at the first run of two blanks). A flag whose value is
one of a fixed set ("TEXT:{text,json}") completes those values; every other value, and a
command's files, complete as paths. Run by cmake/install.cmake at install time (and so by
cpack), checked by tests/deploy/cli_docs_test.sh.
"""
import argparse
import gzip
import os
import re
import shlex
import subprocess
import sys
import tempfile

OPTION_LINE = re.compile(r"^\s+(-[^ ].*?)(?:\s{2,}(.*))?$")
CHOICES = re.compile(r":\{([^}]*)\}")
MAX_COMMANDS = 64  # a guard: the CLI has about twenty


def run_help(binary, path):
    p = subprocess.run([binary, *path, "--help"], capture_output=True, text=True, check=False,
                       timeout=30)
    if p.returncode != 0:
        raise SystemExit("%s %s --help: exit %d: %s" % (binary, " ".join(path), p.returncode,
                                                         p.stderr.strip()))
    return p.stdout


def parse_help(text):
    """(subcommands [(name, summary)], options [(names, takes_value, choices)])."""
    subs, opts, block = [], [], None
    for line in text.splitlines():
        if not line.strip():
            block = None if block == "subs" else block
            continue
        if not line.startswith(" "):
            block = {"Subcommands:": "subs", "Options:": "opts"}.get(line.strip())
            continue
        if block == "subs":
            m = re.match(r"^\s+(\S+)\s{2,}(.*)$", line) or re.match(r"^\s+(\S+)$", line)
            if m:
                subs.append((m.group(1), m.group(2) if m.lastindex and m.lastindex > 1 else ""))
        elif block == "opts":
            m = OPTION_LINE.match(line)
            if not m:
                continue
            head = m.group(1)
            names = [n for n in re.split(r"[ ,]", head) if n.startswith("-")]
            names = [re.sub(r"[=:].*$", "", n) for n in names]
            value = head.split(" ", 1)[1].strip() if " " in head.strip() else ""
            choices = CHOICES.search(value)
            opts.append((names, bool(value), choices.group(1).split(",") if choices else []))
    return subs, opts


def command_tree(binary):
    """{(path...): (subs, opts, help text)} for the binary and every command below it."""
    tree, pending = {}, [()]
    while pending:
        path = pending.pop()
        if len(tree) >= MAX_COMMANDS:
            raise SystemExit("%s: more than %d commands: not CLI11's layout?" % (binary,
                                                                                 MAX_COMMANDS))
        text = run_help(binary, list(path))
        subs, opts = parse_help(text)
        tree[path] = (subs, opts, text)
        pending.extend(path + (name,) for name, _ in reversed(subs))
    return tree


def troff_escape(line):
    line = line.replace("\\", "\\e")
    if line.startswith((".", "'")):
        line = "\\&" + line
    return line


def man_page(binary, name, section, version, summary, tree, out_path):
    """help2man on the binary; every command's own --help added as a COMMANDS section."""
    with tempfile.NamedTemporaryFile("w", suffix=".h2m", delete=False) as inc:
        if len(tree) > 1:
            inc.write("[COMMANDS]\n")
            for path in sorted(p for p in tree if p):
                inc.write('.SS "%s %s"\n.nf\n' % (name, " ".join(path)))
                for line in tree[path][2].rstrip("\n").splitlines():
                    inc.write(troff_escape(line) + "\n")
                inc.write(".fi\n")
        inc.write("[SEE ALSO]\n.BR %s (%s).\n" % (
            ("ckptscand", "8") if name == "ckptscan" else ("ckptscan", "1")))
        inc.write("The full documentation: /usr/share/doc/ckptscan/ (README.md, docs/*.md).\n")
        include = inc.name
    try:
        subprocess.run(["help2man", "--no-info", "--section", section,
                        "--name", summary, "--version-string", version, "--include", include,
                        "--output", out_path, binary], check=True, timeout=60)
    finally:
        os.unlink(include)
    with open(out_path, "rb") as page, open(out_path + ".gz", "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=raw, mtime=0) as z:
            z.write(page.read())
    os.unlink(out_path)


def completion_cases(tree):
    """What both shells' completions switch on: the command paths ("/rules/check"), the flags
    that take a value [(["path:--flag", ...], choices)], and per path its words and whether it
    has commands below (otherwise its other arguments are files)."""
    paths = ["/" + "/".join(p) for p in sorted(p for p in tree if p)]
    values, words = [], []
    for path, (subs, opts, _) in sorted(tree.items()):
        key = "/" + "/".join(path) if path else ""
        for names, takes_value, choices in opts:
            if takes_value:
                values.append((["%s:%s" % (key, n) for n in names], choices))
        words.append((key, [n for names, _, _ in opts for n in names] + [s for s, _ in subs],
                      bool(subs)))
    return paths, values, words


def path_walk(words, first, current, indent, paths):
    """Shell lines that set $cmd to the command path among ${words[first..current-1]}."""
    q = shlex.quote
    lines = ["for ((i = %d; i < %s; i++)); do" % (first, current),
             "  w=${%s[i]}" % words,
             "  [[ $w == -* ]] && continue",
             "  case \"$cmd/$w\" in"]
    lines += ["    %s) cmd=%s ;;" % (q(p), q(p)) for p in paths]
    lines += ["  esac", "done"]
    return [indent + line for line in lines]


def bash_completion(name, tree):
    paths, values, words = completion_cases(tree)
    q = shlex.quote
    lines = ["# bash completion for %s, made from its --help by scripts/gen_cli_docs.py" % name,
             "_%s() {" % name.replace("-", "_"),
             "  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} cmd= i w"]
    lines += path_walk("COMP_WORDS", 1, "COMP_CWORD", "  ", paths)
    lines += ["  case \"$cmd:$prev\" in"]
    for keys, choices in values:
        reply = ("compgen -W %s -- \"$cur\"" % q(" ".join(choices)) if choices
                 else "compgen -f -- \"$cur\"")
        lines.append("    %s) COMPREPLY=($(%s)); return ;;" % ("|".join(map(q, keys)), reply))
    lines += ["  esac", "  case \"$cmd\" in"]
    for key, ws, has_subs in words:
        action = 'COMPREPLY=($(compgen -W %s -- "$cur"))' % q(" ".join(ws))
        if not has_subs:
            action = ('if [[ $cur == -* ]]; then %s; else COMPREPLY=($(compgen -f -- "$cur")); fi'
                      % action)
        lines.append("    %s) %s ;;" % (q(key), action))
    lines += ["  esac", "}", "complete -o filenames -F _%s %s" % (name.replace("-", "_"), name),
              ""]
    return "\n".join(lines)


def zsh_completion(name, tree):
    paths, values, words = completion_cases(tree)
    q = shlex.quote
    lines = ["#compdef %s" % name,
             "# zsh completion for %s, made from its --help by scripts/gen_cli_docs.py" % name,
             "local cmd= prev=${words[CURRENT-1]} w i"]
    lines += path_walk("words", 2, "CURRENT", "", paths)
    lines += ["case \"$cmd:$prev\" in"]
    for keys, choices in values:
        action = "compadd -- %s" % " ".join(map(q, choices)) if choices else "_files"
        lines.append("  %s) %s; return ;;" % ("|".join(map(q, keys)), action))
    lines += ["esac", "case \"$cmd\" in"]
    for key, ws, has_subs in words:
        action = "compadd -- %s" % " ".join(map(q, ws))
        if not has_subs:
            action = "if [[ $PREFIX == -* ]]; then %s; else _files; fi" % action
        lines.append("  %s) %s ;;" % (q(key), action))
    lines += ["esac", ""]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ckptscan", required=True)
    ap.add_argument("--ckptscand", required=True)
    ap.add_argument("--version", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    for sub in ("man1", "man8", "bash-completion", "zsh"):
        os.makedirs(os.path.join(args.out, sub), exist_ok=True)
    programs = [
        ("ckptscan", args.ckptscan, "1", "checks model files (pickle, PyTorch, numpy, GGUF, "
         "ONNX, ...) before anything loads them"),
        ("ckptscand", args.ckptscand, "8", "the ckptscan daemon: scans and converts model files "
         "for hubs over gRPC"),
    ]
    for name, binary, section, summary in programs:
        tree = command_tree(binary)
        man_page(binary, name, section, args.version, summary, tree,
                 os.path.join(args.out, "man" + section, "%s.%s" % (name, section)))
        with open(os.path.join(args.out, "bash-completion", name), "w") as f:
            f.write(bash_completion(name, tree))
        with open(os.path.join(args.out, "zsh", "_" + name), "w") as f:
            f.write(zsh_completion(name, tree))
        print("%s: %d commands, %d flags" % (
            name, len(tree), sum(len(o) for _, o, _ in tree.values())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
