#!/usr/bin/python3
"""Our YAML reading (core/torch/repo_yaml.h) against PyYAML's unsafe loaders, on the YAML
fixtures and on generated documents (a fixed seed): no python/ tag a loader builds is missed.

    yaml_diff.py --ckptscan build/clients/ckptscan --fixtures tests/fixtures/json
                 [--seed 1] [--count 1000]

Documents come two ways: yaml.dump of random data holding python/ objects (every option of
the emitter: flow and block styles, every quoting style, %TAG handles for the python/ prefix,
canonical form, CR line breaks, several documents), and a soup of YAML fragments (handles,
directives, quotes, block scalars, tabs, NEL and U+2028, aliases) that PyYAML mostly refuses.
Each is loaded by tests/fixtures/json/yaml_oracle.py's recording loaders (PyYAML's
UnsafeLoader and libyaml's CUnsafeLoader; harmless names only: os.getcwd, os.getpid) and
scanned by `ckptscan scan --no-sandbox` as a *.yaml file. Whenever a loader reached a python/
constructor, the scan must report repo.yaml_python_tag; whenever yaml.safe_load finds a
`_target_: os.system`, repo.config_code. The other way round is no failure: the scan
over-approximates (counted and printed).
"""
import argparse
import importlib.util
import os
import random
import sys

import yaml

from input_files import InputFiles, fixture_inputs, scan_reports

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(
    "yaml_oracle", os.path.join(HERE, "..", "fixtures", "json", "yaml_oracle.py"))
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)

PYTHON_TAGS = ["!!python/name:os.getcwd ''", "!!python/object/apply:os.getpid []",
               "!<tag:yaml.org,2002:python/name:os.getcwd> ''", "!!%70ython/name:os.getcwd ''",
               "!e!name:os.getcwd ''", "!python/name:os.getcwd ''", "!!name:os.getcwd ''"]
FRAGMENTS = PYTHON_TAGS + [
    "a:", "b: 1", "- ", "-", "? ", ": ", ":", "key: |", "key: >-", "|2", "|", ">", "'", '"',
    "''", "x'y", "[", "]", "{", "}", ",", "#", " # c", "%TAG !e! tag:yaml.org,2002:python/",
    "%TAG ! tag:yaml.org,2002:", "%TAG !! tag:yaml.org,2002:python/", "---", "...", "&a", "*a",
    "\t", "\u2028", "\u0085", "\r", "\r\n", "\\", "\\x41", "text", "plain words", "  ", "    ",
    "!!str", "! x", "!x", "_target_: os.system", "_target_", "os.system", "&b x", "*b"]
# Scalars that look like YAML syntax inside the data yaml.dump writes.
STRINGS = ["a", "b c", "x: y", "# not", "it's", '"q"', "!x", "!!python/name:os.getcwd",
           "line\nbreak", "tab\there", "\u00e9\u4e2d", "\u2028sep", "- dash", "? q", "[x]",
           "{y}", "&a", "*a", "%TAG", "---", "...", " lead", "trail ", "", "os.system",
           "multi\nline\n\ntext", "\\back", "yes", "null", "1.5", "@at", "`tick"]


class PyName:
    """Dumped as !!python/name:os.getcwd ''."""


class PyApply:
    """Dumped as !!python/object/apply:os.getpid []."""


class Dumper(yaml.Dumper):
    pass


Dumper.add_representer(PyName, lambda d, o: d.represent_scalar(
    "tag:yaml.org,2002:python/name:os.getcwd", ""))
Dumper.add_representer(PyApply, lambda d, o: d.represent_sequence(
    "tag:yaml.org,2002:python/object/apply:os.getpid", []))


def value(rng, depth, tagged):
    r = rng.random()
    if depth > 3 or r < 0.4:
        if tagged and rng.random() < 0.15:
            return rng.choice([PyName(), PyApply()])
        if rng.random() < 0.05:
            return {"_target_": "os.system"}
        return rng.choice(STRINGS + [1, 2.5, True, None])
    if r < 0.7:
        return {rng.choice(STRINGS) + str(i): value(rng, depth + 1, tagged)
                for i in range(rng.randint(0, 4))}
    return [value(rng, depth + 1, tagged) for _ in range(rng.randint(0, 4))]


def holds_python(data):
    stack = [data]
    while stack:
        x = stack.pop()
        if isinstance(x, (PyName, PyApply)):
            return True
        stack.extend(x.values() if isinstance(x, dict) else x if isinstance(x, list) else [])
    return False


def dumped(rng):
    tagged = rng.random() < 0.6
    data = value(rng, 0, tagged)
    if tagged and not holds_python(data):
        data = {"k": data, "z": PyName()}
    options = dict(default_flow_style=rng.choice([False, True, None]),
                   allow_unicode=rng.random() < 0.5, width=rng.choice([20, 80, 1000]),
                   indent=rng.choice([2, 3, 4]), explicit_start=rng.random() < 0.3,
                   canonical=rng.random() < 0.15,
                   default_style=rng.choice([None, None, "'", '"', "|", ">"]),
                   line_break=rng.choice([None, "\r\n", "\r"]))
    if rng.random() < 0.3:
        options["tags"] = {rng.choice(["!e!", "!!", "!"]): rng.choice(
            ["tag:yaml.org,2002:python/", "tag:yaml.org,2002:"])}
    return yaml.dump_all([data] * rng.randint(1, 2), Dumper=Dumper, **options)


def soup(rng):
    parts = []
    for _ in range(rng.randint(1, 14)):
        parts.append(rng.choice(FRAGMENTS))
        parts.append(rng.choice(["", " ", "\n", "\n  ", "\n    "]))
    return "".join(parts)


def inputs(rng, count):
    return [(dumped(rng) if i % 2 == 0 else soup(rng)).encode("utf-8") for i in range(count)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ckptscan", required=True)
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=1000)
    args = ap.parse_args()
    data = fixture_inputs(args.fixtures, [".yaml", ".yml"])
    data += inputs(random.Random(args.seed), args.count)
    failures = []
    reached = over = targets = 0
    # No first byte that is a pickle opcode: the scan reads the text as a YAML file only.
    with InputFiles([b"# generated\n" + d for d in data], "yaml_diff.", ".yaml") as files:
        paths = files.paths
        ours = scan_reports(args.ckptscan, paths)
        for p, d in zip(paths, data):
            python, _ = oracle.run(d, yaml.UnsafeLoader)
            c_python, _ = oracle.run(d, yaml.CUnsafeLoader)
            code_target = "os.system" in oracle.targets(d)
            targets += code_target
            r = ours.get(p)
            if r is None:
                failures.append("%s: no report" % os.path.basename(p))
                continue
            rules = {f["rule_id"] for f in r["findings"]}
            if python or c_python:
                reached += 1
                if "repo.yaml_python_tag" not in rules:
                    failures.append("%s: PyYAML reached %s, we found %s in %r" % (
                        os.path.basename(p), (python or c_python)[0], sorted(rules), d[:200]))
            elif "repo.yaml_python_tag" in rules:
                over += 1
            if code_target and "repo.config_code" not in rules:
                failures.append("%s: safe_load finds _target_: os.system, we found %s in %r" % (
                    os.path.basename(p), sorted(rules), d[:200]))
    for f in failures[:20]:
        print("FAIL", f)
    print("yaml differential: %d documents, %d where a loader built a python/ tag, %d flagged "
          "without one (over-approximation), %d with a _target_: os.system; %d failures" % (
              len(data), reached, over, targets, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
