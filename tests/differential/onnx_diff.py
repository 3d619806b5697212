#!/usr/bin/python3
"""Our ONNX reading (core/onnx/onnx_check.h) against protobuf's own decoding of the same bytes,
on the ONNX fixtures and on generated, truncated, mutated, reordered and extended models (a
fixed seed), and our schema (proto/onnx/onnx.proto) against the installed onnx's.

    onnx_diff.py --facts-tool build/tests/tools/pickle_facts --fixtures tests/fixtures/onnx
                 [--seed 1] [--count 2000] [--schema proto/onnx/onnx.proto]
                 [--reference-proto PATH]

1. The schema. protoc compiles our onnx.proto and the reference (--reference-proto, else the
   installed onnx's onnx-ml.proto, else onnx.proto, else /usr/include/onnx/onnx.proto) into
   descriptors: every field of every message of the reference must be in ours with the same
   number, name, type, label and message type. Fields ours has beyond it are listed (onnx 1.12
   lacks onnx 1.13-1.17's; against onnx 1.17's own file there are none).

2. Which bytes are a model, and which hold fields the schema does not know. The oracle is
   Python's protobuf decoding ModelProto with our schema (a pool of its own, so the installed
   onnx is not disturbed): what onnxruntime 1.21's parser does with onnx 1.17's schema. A model
   is what decodes and has a graph; ours is pickle_facts --read-file (torch::ReadFile, as the
   scanner reads): format "onnx" and no decoding error. They must agree, and a decoded model
   whose tree holds an unknown field anywhere must carry our "does not know" error, one without
   none. One explained difference: Python's protobuf stops at a stray end-group tag and keeps
   what it read before (a warning, "Not all data was converted"), where C++'s parser refuses
   the message; we refuse such inputs (ERROR, never SAFE).

Inputs beside the fixtures: truncations, byte flips, inserted and deleted bytes, spliced
models, top-level fields shuffled into any order, unknown fields (every wire type, groups
included) put first, last, or inside the graph, a node or a tensor, and the pickle-shaped
unknown field of tests/fixtures/onnx (a model pickle.load reads as bytes). What the walk
judges (external data locations, operator domains) is asserted on the fixtures by
check_verdicts.py. Exit 77 (skip) without python3-onnx or protoc.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import warnings

try:
    import onnx
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
except ImportError:
    print("onnx_diff: SKIP: python3-onnx is not installed (scripts/setup.sh installs it)")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DECODE_ERRORS = ("not a valid ONNX ModelProto", "an ONNX ModelProto without a graph")
UNKNOWN = "does not know"
# ModelProto's field numbers in onnx 1.17: an unknown top-level field is any other.
MODEL_FIELDS = {1, 2, 3, 4, 5, 6, 7, 8, 14, 20, 25}


def descriptors(proto, include):
    """The FileDescriptorSet protoc makes of `proto` (its dependencies included)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "set.pb")
        subprocess.run(["protoc", "-I" + include, "--include_imports",
                        "--descriptor_set_out=" + out, proto], check=True)
        fds = descriptor_pb2.FileDescriptorSet()
        with open(out, "rb") as f:
            fds.ParseFromString(f.read())
        return fds


def fields(fds):
    """{(message, number): (name, type, label, type_name)} of every message in the set."""
    out = {}

    def walk(prefix, messages):
        for m in messages:
            name = prefix + m.name
            for f in m.field:
                out[(name, f.number)] = (f.name, f.type, f.label, f.type_name.rsplit(".", 1)[-1])
            walk(name + ".", m.nested_type)
    for file in fds.file:
        walk("", file.message_type)
    return out


def reference_proto():
    pkg = os.path.dirname(onnx.__file__)
    for name in ("onnx-ml.proto", "onnx.proto"):
        if os.path.exists(os.path.join(pkg, name)):
            return os.path.join(pkg, name)
    return "/usr/include/onnx/onnx.proto"


def check_schema(schema, reference):
    """Problems of our schema against the reference, and the fields ours adds."""
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "onnx"))
        shutil.copy(reference, os.path.join(tmp, "onnx", "onnx.proto"))
        theirs = fields(descriptors(os.path.join(tmp, "onnx", "onnx.proto"), tmp))
    ours = fields(descriptors(schema, os.path.dirname(os.path.dirname(schema))))
    problems = ["%s field %d: %s in the reference, %s in ours" % (m, n, theirs[(m, n)],
                                                                    ours.get((m, n), "missing"))
                for (m, n) in sorted(theirs) if ours.get((m, n)) != theirs[(m, n)]]
    extra = sorted("%s.%s (%d)" % (m, ours[(m, n)][0], n) for (m, n) in ours if (m, n) not in theirs)
    return problems, extra


def model_class(schema):
    """ModelProto of our schema, from a descriptor pool of its own."""
    fds = descriptors(schema, os.path.dirname(os.path.dirname(schema)))
    pool = descriptor_pool.DescriptorPool()
    for file in fds.file:
        pool.Add(file)
    return message_factory.MessageFactory(pool).GetPrototype(
        pool.FindMessageTypeByName("onnx.ModelProto"))


def has_unknown(message):
    """Whether any message of the tree holds an unknown field (iterative)."""
    pending = [message]
    while pending:
        m = pending.pop()
        if len(m.UnknownFields()):
            return True
        for desc, value in m.ListFields():
            if desc.message_type is None:
                continue
            pending.extend(value if desc.label == desc.LABEL_REPEATED else [value])
    return False


def oracle(model_cls, data):
    """(decodes with a graph, partial, unknown fields anywhere)."""
    m = model_cls()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            m.ParseFromString(data)
        except Exception:  # noqa: BLE001 - any decode error is "no model"
            return False, False, False
    partial = any("Not all data was converted" in str(w.message) for w in caught)
    return m.HasField("graph"), partial, has_unknown(m)


# ---- protobuf by hand
def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def read_varint(data, pos):
    v, shift = 0, 0
    while True:
        b = data[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return v, pos


def top_fields(data):
    """[(number, wire, field bytes, payload)] of a well-formed message, or None."""
    out, pos = [], 0
    try:
        while pos < len(data):
            start = pos
            tag, pos = read_varint(data, pos)
            wire, payload_at = tag & 7, pos
            if wire == 0:
                _, pos = read_varint(data, pos)
            elif wire == 1:
                pos += 8
            elif wire == 2:
                n, pos = read_varint(data, pos)
                payload_at = pos
                pos += n
            elif wire == 5:
                pos += 4
            else:
                return None
            if pos > len(data):
                return None
            out.append((tag >> 3, wire, data[start:pos], data[payload_at:pos]))
    except IndexError:
        return None
    return out


def unknown_field(rng, known):
    """A field whose number `known` does not hold, of a random wire type (groups too)."""
    number = rng.choice([n for n in (9, 10, 11, 12, 13, 15, 16, 17, 21, 99, 1000, 2**29 - 1)
                         if n not in known])
    wire = rng.choice([0, 1, 2, 3, 5])
    if wire == 0:
        return varint(number << 3) + varint(rng.randrange(2**64))
    if wire == 1:
        return varint(number << 3 | 1) + bytes(rng.randrange(256) for _ in range(8))
    if wire == 5:
        return varint(number << 3 | 5) + bytes(rng.randrange(256) for _ in range(4))
    if wire == 2:
        payload = bytes(rng.randrange(256) for _ in range(rng.randint(0, 12)))
        return varint(number << 3 | 2) + varint(len(payload)) + payload
    inner = varint(1 << 3) + varint(rng.randrange(1000))
    return varint(number << 3 | 3) + inner + varint(number << 3 | 4)


def with_unknown_inside(data, rng):
    """`data` with an unknown field put into its graph, or into the graph's first node or
    initializer (a repeated submessage field, re-encoded)."""
    top = top_fields(data)
    if top is None:
        return None
    out = []
    done = False
    for number, wire, raw, payload in top:
        if number == 7 and wire == 2 and not done:
            graph = payload
            target = rng.choice(["graph", "node", "initializer"])
            if target == "graph":
                graph = graph + unknown_field(rng, {1, 2, 5, 10, 11, 12, 13, 14, 15, 16})
            else:
                inner = top_fields(graph) or []
                want = 1 if target == "node" else 5
                known = {1, 2, 3, 4, 5, 6, 7, 8, 9} if target == "node" else \
                    {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 16}
                rebuilt, hit = [], False
                for n, w, r, p in inner:
                    if n == want and w == 2 and not hit:
                        p = p + unknown_field(rng, known)
                        r = varint(n << 3 | 2) + varint(len(p)) + p
                        hit = True
                    rebuilt.append(r)
                graph = b"".join(rebuilt)
            raw = varint(7 << 3 | 2) + varint(len(graph)) + graph
            done = True
        out.append(raw)
    return b"".join(out)


def as_pickle_prefix(data):
    """tests/fixtures/onnx's shape: a 10-byte unknown field that pickle.load reads as
    BININT and BINBYTES swallowing the model up to a last STOP."""
    tail = varint(6 << 3 | 2) + varint(2) + b"x."
    body = data + tail[:-1]
    return bytes([0x4A, 0x08, 0, 0, 0, 0x42]) + len(body).to_bytes(4, "little") + body + b"."


def mutations(base, rng, count):
    """Truncations, byte flips, inserted and deleted bytes, spliced models, shuffled fields,
    unknown fields at the top level and inside, the pickle-shaped prefix."""
    out = []
    for i in range(count):
        data = bytearray(base[rng.randrange(len(base))])
        kind = i % 8
        if kind == 0 and len(data) > 1:
            data = data[:rng.randrange(1, len(data))]
        elif kind == 1:
            for _ in range(rng.randint(1, 4)):
                p = rng.randrange(len(data))
                data[p] ^= 1 << rng.randrange(8)
        elif kind == 2:
            p = rng.randrange(len(data))
            data[p:p] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif kind == 3:
            other = base[rng.randrange(len(base))]
            data = data[:rng.randrange(len(data))] + other[rng.randrange(len(other)):]
        elif kind == 4:
            top = top_fields(bytes(data))
            if top:
                rng.shuffle(top)
                data = b"".join(f[2] for f in top)
        elif kind == 5:
            field = unknown_field(rng, MODEL_FIELDS)
            data = field + data if rng.randrange(2) else data + field
        elif kind == 6:
            data = with_unknown_inside(bytes(data), rng) or data
        else:
            data = as_pickle_prefix(bytes(data))
        out.append(bytes(data))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--facts-tool", required=True)
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--schema", default=os.path.join(REPO, "proto", "onnx", "onnx.proto"))
    ap.add_argument("--reference-proto", default=None)
    args = ap.parse_args()
    if shutil.which("protoc") is None:
        print("onnx_diff: SKIP: protoc is not installed")
        return 77
    reference = args.reference_proto or reference_proto()
    problems, extra = check_schema(os.path.abspath(args.schema), reference)
    for p in problems:
        print("SCHEMA " + p)
    print("onnx_diff: schema: %d fields of %s differ from ours; ours adds %d: %s" % (
        len(problems), reference, len(extra), ", ".join(extra) or "none"))
    model_cls = model_class(os.path.abspath(args.schema))

    base = []
    for dirpath, _, names in sorted(os.walk(args.fixtures)):
        for n in sorted(names):
            if n.endswith(".onnx"):
                with open(os.path.join(dirpath, n), "rb") as f:
                    base.append(f.read())
    rng = random.Random(args.seed)
    inputs = base + mutations(base, rng, args.count)
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i, data in enumerate(inputs):
            p = os.path.join(tmp, "%05d.onnx" % i)
            with open(p, "wb") as f:
                f.write(data)
            paths.append(p)
        ours = {}
        for start in range(0, len(paths), 500):
            proc = subprocess.run([args.facts_tool, "--read-file"] + paths[start:start + 500],
                                  capture_output=True, text=True, timeout=600)
            if proc.returncode != 0:
                print("onnx_diff: the facts tool failed: %s" % proc.stderr[-2000:])
                return 1
            for line in proc.stdout.splitlines():
                r = json.loads(line)
                ours[r["file"]] = r
    failures = []
    agree_model = agree_not = stricter = unknown = other = 0
    for p, data in zip(paths, inputs):
        r = ours.get(p)
        if r is None:
            failures.append("%s: missing from the facts tool's output" % p)
            continue
        err = r.get("stream_error") or ""
        we = r["format"] == "onnx" and not any(e in err for e in DECODE_ERRORS)
        they, partial, they_unknown = oracle(model_cls, data)
        if they and partial and not we:
            stricter += 1  # we refuse what Python's protobuf reads only in part: never SAFE
            continue
        if they and not we and r["format"] != "onnx" and err:
            # Another format's reading came first (a model whose first byte is a zlib header is
            # read as a compressed joblib file) and refused the bytes: never SAFE. Counted; a
            # reading that accepted them would be a disagreement.
            other += 1
            continue
        if we != they:
            failures.append("%s (%d bytes): protobuf %s, we %s (%s, %s)" % (
                os.path.basename(p), len(data), "decodes" if they else "refuses",
                "decode" if we else "refuse", r["format"], err[:160]))
        elif we:
            agree_model += 1
            # A model with unknown fields must be refused; naming another error first (an
            # external data entry the walk stopped at) refuses it too.
            if (they_unknown and not err) or (not they_unknown and UNKNOWN in err):
                failures.append("%s (%d bytes): unknown fields: protobuf %s, we %s (%s)" % (
                    os.path.basename(p), len(data), they_unknown, UNKNOWN in err, err[:160]))
            unknown += they_unknown
        else:
            agree_not += 1
    for f in failures[:20]:
        print("DISAGREE " + f)
    print("onnx_diff: %d inputs (%d fixtures), %d decoded by both (%d with unknown fields, "
          "refused as not verified by us), %d refused by both, %d read only in part by "
          "Python's protobuf and refused by us, %d models refused by another format's reading, "
          "%d disagreements" % (len(inputs), len(base), agree_model, unknown, agree_not, stricter,
                                other, len(failures)))
    return 1 if failures or problems else 0


if __name__ == "__main__":
    sys.exit(main())
