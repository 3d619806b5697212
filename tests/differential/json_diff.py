#!/usr/bin/python3
"""Our JSON reading (base/json_python.h, as the scanner reads repository JSON) against Python's
own json.loads(bytes), on the JSON fixtures and on generated documents (a fixed seed).

    json_diff.py --ckptscan build/clients/ckptscan --fixtures tests/fixtures/json
                 [--seed 1] [--count 2000]

Every document is written in each encoding json.detect_encoding tells apart (UTF-8 with and
without a BOM, UTF-16 and UTF-32, either byte order, with and without a BOM), and mutated:
bytes flipped, inserted and deleted, cut. Python's side: json.loads of the bytes returns a
dict (what transformers and Keras read). Ours: `ckptscan scan --no-sandbox` reads the file as
JSON ("json" or "hf-index") with no decoding or syntax error. They must agree on every input;
what we then judge in the documents is asserted on the fixtures by check_verdicts.py.
"""
import argparse
import json
import os
import random
import sys

from input_files import InputFiles, fixture_inputs, scan_reports

ENCODINGS = ["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le",
             "utf-32-be"]
# Documents Python reads, and near misses it refuses.
TEXTS = [
    '{"a": 1}', '{"a": NaN, "b": -Infinity, "c": Infinity}', '{"a": "\\ud800"}',
    '{"a": 1, "a": 2}', '{"x": [1, 2.5e400, -0.0, 1E-5]}', ' \t\n{"k": "v"} \r\n',
    '{"a": "\\u00e9\\ud83d\\ude00"}', '{"a": "\\udc00\\ud800"}', '{"a": true, "b": null}',
    '{"\\u0000": 1}', '{"a": {"b": [{"c": []}]}}', '{"a": "\u00e9\u4e2d"}',
    '{"a": 01}', '{"a": [1,]}', '{"a": 1e}', '{"a": "x\x01"}', '{"a": "\\x"}',
    '{"a": Infinity1}', '{"a": -NaN}', '{"a": 1} x', '{"a": 1}\ufeff', '\ufeff{"a": 1}',
    '{"a": ' + '7' * 4300 + '}', '{"a": ' + '7' * 4301 + '}', '{"a": -' + '7' * 4300 + '}',
    '{"a": 1.' + '7' * 5000 + '}', '{"a": nan}', '{"a": .5}', '{"a": +1}', "{'a': 1}",
    '{"a": 1 /* c */}', '{"a":\u00a01}', '[1, 2]', '"text"',
]


def python_reads(data):
    try:
        return isinstance(json.loads(data), dict)
    except (ValueError, RecursionError):
        return False


def starts_as_object(data):
    """Whether the text json.loads decodes begins, after white space, with '{'."""
    try:
        text = data.decode(json.detect_encoding(data), "surrogatepass")
    except UnicodeDecodeError:
        return False
    return text.lstrip(" \t\n\r").startswith("{")


def inputs(rng, count):
    docs = []
    for t in TEXTS:
        for e in ENCODINGS:
            try:
                docs.append(t.encode(e, "surrogatepass"))
            except UnicodeEncodeError:
                pass
    out = list(docs)
    for i in range(count):
        d = bytearray(docs[rng.randrange(len(docs))])
        kind = i % 4
        if kind == 0 and d:
            d[rng.randrange(len(d))] ^= 1 << rng.randrange(8)
        elif kind == 1:
            p = rng.randrange(len(d) + 1)
            d[p:p] = bytes([rng.choice([0, 0xef, 0xbb, 0xbf, 0xfe, 0xff, 0xed, 0xa0, 0x80,
                                        ord("{"), ord("}"), ord('"'), ord("\\"), ord(" ")])])
        elif kind == 2 and d:
            del d[rng.randrange(len(d))]
        elif d:
            d = d[:rng.randrange(len(d))]
        out.append(bytes(d))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ckptscan", required=True)
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=2000)
    args = ap.parse_args()
    data = fixture_inputs(args.fixtures, [".json"], skip=["manifest.json"])
    data += inputs(random.Random(args.seed), args.count)
    failures = []
    agree_json = agree_not = 0
    with InputFiles(data, "json_diff.", ".json") as files:
        paths = files.paths
        ours = scan_reports(args.ckptscan, paths)
        for p, d in zip(paths, data):
            r = ours.get(p)
            if r is None:
                failures.append("%s: no report" % os.path.basename(p))
                continue
            # An index's shard name refused (a judgement of what was read) is a reading.
            # A document that is also an ONNX model is read as both; its JSON errors say "JSON:".
            if r["format"] == "onnx":
                we = starts_as_object(d) and not any(
                    e["message"].startswith("JSON:") for e in r["errors"])
            else:
                we = r["format"] in ("json", "hf-index") and not any(
                    e["code"] in ("malformed", "unsupported")
                    and "shard file name" not in e["message"] for e in r["errors"])
            they = python_reads(d)
            if we != they:
                failures.append("%s (%d bytes, %r...): json.loads %s, we %s (%s, %s)" % (
                    os.path.basename(p), len(d), d[:16], "reads" if they else "refuses",
                    "read" if we else "refuse", r["format"],
                    [e["message"][:120] for e in r["errors"]][:1]))
            elif we:
                agree_json += 1
            else:
                agree_not += 1
    for f in failures[:20]:
        print("DISAGREE " + f)
    print("json_diff: %d inputs, %d read by both, %d refused by both, %d disagreements" % (
        len(data), agree_json, agree_not, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
