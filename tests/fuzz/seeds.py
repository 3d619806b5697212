#!/usr/bin/python3
"""Assembles each fuzz target's seed corpus from the test fixtures (docs/security.md).

Nothing is duplicated in git: seeds are copied (or, for a few targets, generated) from
tests/fixtures/, rules/ and the upstream signing vectors into OUT/<target>/, which
scripts/fuzz.sh hands to libFuzzer and tests/fuzz/replay_test.sh to the replay driver.

    tests/fuzz/seeds.py --out DIR [--seed-tool PATH] [TARGET...]     (default: every target)

--seed-tool is the built fuzz_seed_tool (tests/fuzz/seed_tool.cc); the facts_codec target
needs it (its seeds are the worker's result frames for the fixture files). Stdlib only.
"""
import argparse
import base64
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
TARGETS = ("pickle", "zip", "legacy", "extract", "safetensors", "signing", "facts_codec",
           "rules", "compress", "content", "gguf", "onnx", "repo_config")
MAX_SEED_BYTES = 256 << 10  # the largest input cap of any target (tests/fuzz/*_fuzz.cc)
# Not checkpoints: generators, checkers, manifests and expectations of the fixture corpus.
NOT_INPUTS = (".py", ".md", ".pyc")
NOT_INPUT_NAMES = ("manifest.json", "expectations.json", "roundtrip_expectations.json",
                   "sarif-schema-2.1.0.json")
LEGACY_MAGIC = b"\x80\x02\x8a\x0a"  # protocol 2, LONG1 of 10 bytes: torch's magic number


def files_under(*dirs):
    for d in dirs:
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, d)):
            dirnames[:] = sorted(n for n in dirnames if n != "__pycache__")
            for name in sorted(filenames):
                if name.endswith(NOT_INPUTS) or name in NOT_INPUT_NAMES:
                    continue
                path = os.path.join(dirpath, name)
                if os.path.isfile(path) and os.path.getsize(path) <= MAX_SEED_BYTES:
                    yield path


def read(path):
    with open(path, "rb") as f:
        return f.read()


def repository_files():
    """The files of the fixture repository (text, JSON, an image, a SentencePiece model, ...)."""
    return list(files_under("tests/fixtures/repo/model"))


def chat_templates():
    """Templates in the shapes real models ship, and escapes of the kinds the checker reports."""
    return {
        "chatml.jinja": b"{% for message in messages %}{{'<|im_start|>' + message['role'] + "
                        b"'\\n' + message['content'] + '<|im_end|>\\n'}}{% endfor %}",
        "ns.jinja": b"{%- set ns = namespace(found=false) %}{%- for m in messages %}"
                    b"{%- if m.role == 'tool' %}{%- set ns.found = true %}{%- endif %}"
                    b"{{- m.content | tojson }}{%- endfor %}{# comment #}",
        "escape.jinja": b"{{ ()|attr('\\x5f\\x5fclass\\x5f\\x5f') }}{{ lipsum.__globals__ }}"
                        b"{{ '%c%c'|format(95,95) ~ 'x' }}{% import 'a' as b %}{{ '\\N{LOW LINE}' }}",
    }


def checkpoint_files():
    return list(files_under("tests/fixtures/pickles", "tests/fixtures/torch",
                            "tests/fixtures/containers", "tests/fixtures/joblib",
                            "tests/fixtures/zip", "tests/fixtures/gguf", "tests/fixtures/keras",
                            "tests/fixtures/onnx", "tests/fixtures/torchscript"))


def safetensors_file(tensors, metadata=None, pad=0):
    """A safetensors file: {name: (dtype, shape, nbytes)} laid out in order."""
    header, offset = {}, 0
    for name, (dtype, shape, nbytes) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8 + pad)
    return struct.pack("<Q", len(text)) + text + bytes(range(256)) * (offset // 256) + \
        bytes(offset % 256)


def generated_safetensors():
    return {
        "empty.safetensors": safetensors_file({}),
        "one_f32.safetensors": safetensors_file({"w": ("F32", [2, 3], 24)}),
        "scalar_and_empty.safetensors": safetensors_file(
            {"s": ("I64", [], 8), "e": ("BF16", [0, 4], 0)}),
        "metadata.safetensors": safetensors_file(
            {"a.weight": ("F16", [4, 4], 32), "a.bias": ("F16", [4], 8)},
            metadata={"format": "pt", "source": "fuzz"}),
        "dtypes.safetensors": safetensors_file(
            {"b": ("BOOL", [3], 3), "u": ("U8", [5], 5), "d": ("F64", [1], 8),
             "i": ("I32", [2, 1, 1], 8), "f8": ("F8_E4M3", [7], 7)}, pad=8),
    }


def signing_seeds():
    out = {}
    for path in files_under("tests/fixtures/oms"):
        if not (path.endswith(".sig") or path.endswith(".json")):
            continue
        rel = os.path.relpath(path, os.path.join(FIXTURES, "oms")).replace("/", "_")
        data = read(path)
        out[rel] = data
        # The statement inside, decoded: the fuzzer mutates it as JSON, not as base64.
        try:
            payload = json.loads(data)["dsseEnvelope"]["payload"]
            out[rel + ".statement.json"] = base64.b64decode(payload)
        except (ValueError, KeyError, TypeError):
            pass
    return out


def rules_seeds():
    out = {"default_rules.textproto": read(os.path.join(ROOT, "rules",
                                                        "default_rules.textproto"))}
    out["minimal.textproto"] = b"""version: "fuzz.1"
allow {
  module: "collections"
  name: "OrderedDict"
  calls { op: CALL_REDUCE min_args: 0 max_args: 1 }
}
deny {
  module: "os"
  name: "*"
  category: CATEGORY_SHELL
  dangerous: true
  severity: SEVERITY_CRITICAL
  why: "os"
  source: "fuzz"
}
"""
    return out


def result_frames(seed_tool):
    if not seed_tool:
        raise SystemExit("seeds.py: the facts_codec target needs --seed-tool (fuzz_seed_tool)")
    files = checkpoint_files() + [os.path.join(FIXTURES, "torch", "sharded",
                                               "pytorch_model.bin.index.json")]
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        st_dir = os.path.join(tmp, "st")
        os.mkdir(st_dir)
        for name, data in generated_safetensors().items():
            with open(os.path.join(st_dir, name), "wb") as f:
                f.write(data)
            files.append(os.path.join(st_dir, name))
        frames = os.path.join(tmp, "frames")
        os.mkdir(frames)
        subprocess.run([seed_tool, frames] + files, check=True)
        for i, path in enumerate(files):
            out[os.path.basename(path) + ".result"] = read(os.path.join(frames, "%d.result" % i))
    return out


def seeds_for(target, seed_tool):
    """{file name: bytes} for one target."""
    def from_files(paths, keep=lambda data: True):
        out = {}
        for p in paths:
            data = read(p)
            if keep(data):
                out[os.path.relpath(p, FIXTURES).replace("/", "_")] = data
        return out

    if target == "pickle":
        return from_files(files_under("tests/fixtures/pickles", "tests/fixtures/joblib"),
                          ) | from_files(checkpoint_files(),
                                         lambda d: d.startswith((b"\x80", b"(", b"c", b"}")))
    if target == "zip":
        return from_files(checkpoint_files(), lambda d: b"PK\x05\x06" in d)
    if target == "legacy":
        return from_files(checkpoint_files(), lambda d: d.startswith(LEGACY_MAGIC))
    if target == "extract":
        out = from_files(checkpoint_files()) | from_files(repository_files())
        out.update(generated_safetensors())
        out["pytorch_model.bin.index.json"] = read(
            os.path.join(FIXTURES, "torch", "sharded", "pytorch_model.bin.index.json"))
        return out
    if target == "safetensors":
        return generated_safetensors()
    if target == "compress":
        # joblib's compressed files (and the damaged ones) among the fixtures.
        return from_files(files_under("tests/fixtures/joblib"),
                          lambda d: d.startswith((b"\x78", b"\x1f\x8b", b"BZ", b"\x5d\x00",
                                                  b"\xfd7zXZ", b"\x04\x22\x4d\x18")))
    if target == "onnx":
        return from_files(files_under("tests/fixtures/onnx"))
    if target == "gguf":
        return from_files(files_under("tests/fixtures/gguf"))
    if target == "content":
        return from_files(repository_files()) | chat_templates()
    if target == "repo_config":
        # Repository JSON and YAML configs: auto_map, _target_, python tags, adapter configs.
        return from_files(files_under("tests/fixtures/json"))
    if target == "signing":
        return signing_seeds()
    if target == "facts_codec":
        return result_frames(seed_tool)
    if target == "rules":
        return rules_seeds()
    raise SystemExit("seeds.py: unknown target %r (targets: %s)" % (target, " ".join(TARGETS)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="OUT/<target>/ is replaced")
    ap.add_argument("--seed-tool", help="the built fuzz_seed_tool (facts_codec seeds)")
    ap.add_argument("targets", nargs="*", default=list(TARGETS))
    args = ap.parse_args()
    for target in args.targets:
        seeds = seeds_for(target, args.seed_tool)
        out = os.path.join(args.out, target)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        seen = set()
        for name, data in sorted(seeds.items()):
            digest = hashlib.sha1(data).hexdigest()
            if digest in seen:  # libFuzzer dedups too; keep the corpus small
                continue
            seen.add(digest)
            with open(os.path.join(out, name), "wb") as f:
                f.write(data)
        print("seeds: %-12s %4d inputs -> %s" % (target, len(seen), out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
