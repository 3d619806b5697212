#!/usr/bin/python3
"""scan_then_load over every SAFE torch fixture, beside plain torch.load: one JSON line each.

    scan_then_load_matrix.py --fixtures tests/fixtures (--ckptscan PATH | --server ADDRESS)
                             [--out FILE.jsonl]

Run it with the Python whose torch is to be tested: Debian 12's /usr/bin/python3 (torch 1.13,
with --ckptscan: scan_then_load's default, the local CLI), or python3 in the Debian 13 root
(torch 2.6, with --server: the CLI is built for Debian 12, so there the client uploads to a
ckptscand on the host through a unix socket; scripts/scan_then_load_trixie.sh). The client is
this source tree's ckptscan_client (clients/python, beside this file).

Which fixtures (the set, decided by what the files are, never by their names):
  1. every entry that expects SAFE in a fixture manifest: tests/fixtures/**/manifest.json
     (lists of {"file", "expect", ...}; a manifest without "expect", the real-world corpus's,
     names no expected verdict and is left out) and tests/fixtures/modern/expectations.json
     (its "files" map has the same "expect" field: the files torch 2.6 wrote);
  2. of those, the ones ckptscan's report (this run's scan: the CLI, or the daemon by upload)
     gives a format torch.load opens with its unpickler: torch-zip, torch-legacy or torch-tar
     (TORCH_FORMATS). A .pt that is really an npy is left out; a .pkl that is a legacy torch
     file is in. (TorchScript archives go to torch.jit.load instead, and none is SAFE.)
Files under tests/fixtures with no manifest entry (convert_exact/, quantized/, zip/, ...) have
no expected verdict and are not in the set.

Each line, sorted by fixture, after a first {"meta": ...} line (versions and counts):
  fixture         the path under --fixtures
  sha256, format, verdict   of the file, from the selecting scan
  scan_then_load  scan_then_load(path, map_location="cpu", ckptscan= or server=)
  torch_wo        torch.load(path, map_location="cpu", weights_only=True)
  torch           torch.load(path, map_location="cpu", weights_only=False): run only when the
                  selecting scan said SAFE (it would run a payload)
each an outcome: {"outcome": "loaded", "type", "tensors", "digest"} (digest: SHA-256 of a
canonical description of what was returned: containers and their keys in order, scalars,
every tensor's class, dtype, shape, strides, offset, requires_grad, quantization, the SHA-256
of its elements, and which tensors share a storage) or {"outcome": "refused", "error": the
exception's type, "reason": its message's gist (torch's weights_only errors: the
"WeightsUnpickler error" sentence), paths replaced by <file>}.
  status          "same": scan_then_load loaded what torch.load(weights_only=True) loads;
                  "refused": both refused, with the same error; "refused_by" says whether
                  torch's weights_only unpickler refused it ("weights_only unpickler", a
                  global or opcode it does not allow) or torch cannot read it at all ("torch");
                  "BUG: ..." anything else: scan_then_load does not load a SAFE file torch
                  loads, or returns something else, or the scan did not pass the file.
The lines are the same bytes on every run of the same inputs. Exits 1 when a status is a BUG
(the file is written first), 2 on a usage or scan error.
"""

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree (it may be read-only)

TORCH_FORMATS = ("torch-zip", "torch-legacy", "torch-tar")
# Manifests other than tests/fixtures/**/manifest.json that give files an expected verdict.
OTHER_LISTS = ("modern/expectations.json",)
REASON_CHARS = 300


# ---------------------------------------------------------------------------------------------
# The set

def expected_safe(fixtures):
    """The fixtures a manifest expects SAFE: sorted paths relative to FIXTURES."""
    found = set()
    for folder, dirs, files in os.walk(fixtures):
        dirs.sort()
        if "manifest.json" not in files:
            continue
        with open(os.path.join(folder, "manifest.json"), "rb") as f:
            entries = json.load(f)
        for e in entries if isinstance(entries, list) else []:
            if isinstance(e, dict) and e.get("expect") == "SAFE":
                found.add(os.path.relpath(os.path.join(folder, e["file"]), fixtures))
    for rel in OTHER_LISTS:
        with open(os.path.join(fixtures, rel), "rb") as f:
            listed = json.load(f)["files"]
        for name, e in listed.items():
            if e.get("expect") == "SAFE":
                found.add(os.path.join(os.path.dirname(rel), name))
    return sorted(found)


def scan_with_cli(ckptscan, fixtures, rels):
    """{rel: report entry} from one `ckptscan scan` of all of them."""
    paths = [os.path.join(fixtures, r) for r in rels]
    run = subprocess.run([ckptscan, "scan", "--format", "json", "--digest", "sha256", "--"]
                         + paths, capture_output=True, timeout=600, check=False)
    try:
        report = json.loads(run.stdout)
    except ValueError:
        raise SystemExit("scan_then_load_matrix: %s exited %d without a report: %s" % (
            ckptscan, run.returncode, run.stderr.decode(errors="replace")[-600:])) from None
    by_path = {f["path"]: f for f in report["files"]}
    return {r: by_path.get(p) for r, p in zip(rels, paths)}


def scan_with_daemon(client, fixtures, rels):
    """{rel: report entry}, each file uploaded to the daemon (as scan_then_load does)."""
    from ckptscan_client import report_to_dict  # pylint: disable=import-outside-toplevel
    out = {}
    for r in rels:
        with open(os.path.join(fixtures, r), "rb") as f:
            report = report_to_dict(client.scan_bytes(r, f, skip_digest=False))
        out[r] = (report.get("files") or [None])[0]
    return out


def torch_loadable(entries):
    """The fixtures whose scan gave a format torch.load unpickles, sorted."""
    return sorted(r for r, e in entries.items() if e and e.get("format") in TORCH_FORMATS)


# ---------------------------------------------------------------------------------------------
# What a load returned

def qualname(obj):
    t = type(obj)
    return "%s.%s" % (t.__module__, t.__qualname__)


def element_bytes(torch, t):
    """The elements of tensor T in C order, as bytes (dtypes numpy lacks: as integers of the
    same width)."""
    t = t.detach().cpu().contiguous()
    try:
        return t.numpy().tobytes()
    except (TypeError, RuntimeError):
        same_width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
        return t.view(same_width[t.element_size()]).numpy().tobytes()


class Describer:
    """A canonical, JSON-able description of a loaded object (see the module's doc)."""

    def __init__(self, torch):
        self.torch = torch
        self.storages = {}  # (device, data_ptr, nbytes) -> its index, in order of first use
        self.tensors = 0
        self.stack = set()

    def storage_index(self, t):
        storage = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
        nbytes = storage.nbytes()
        ptr = storage.data_ptr()
        if ptr == 0:  # no memory (empty): nothing to share, a storage of its own
            key = ("empty", len(self.storages))
        else:
            key = (str(t.device), ptr, nbytes)
        return [self.storages.setdefault(key, len(self.storages)), nbytes]

    def tensor(self, t):
        torch = self.torch
        self.tensors += 1
        d = {"class": qualname(t), "dtype": str(t.dtype), "shape": list(t.shape),
             "layout": str(t.layout), "device": t.device.type,
             "requires_grad": bool(t.requires_grad)}
        if t.layout == torch.sparse_coo:
            d["indices"] = self.describe(t._indices())
            d["values"] = self.describe(t._values())
            return d
        if t.layout != torch.strided:
            d["unsupported_layout"] = True
            return d
        d["stride"] = list(t.stride())
        d["offset"] = t.storage_offset()
        if t.device.type == "meta":
            return d
        if t.is_quantized:
            scheme = t.qscheme()
            d["qscheme"] = str(scheme)
            if scheme in (torch.per_tensor_affine, torch.per_tensor_symmetric):
                d["scale"] = repr(t.q_scale())
                d["zero_point"] = t.q_zero_point()
            else:
                d["axis"] = t.q_per_channel_axis()
                d["scales"] = self.describe(t.q_per_channel_scales())
                d["zero_points"] = self.describe(t.q_per_channel_zero_points())
            d["sha256"] = hashlib.sha256(element_bytes(torch, t.int_repr())).hexdigest()
            return d
        d["storage"] = self.storage_index(t)
        d["sha256"] = hashlib.sha256(element_bytes(torch, t)).hexdigest()
        return d

    def describe(self, obj):
        torch = self.torch
        if obj is None or isinstance(obj, (bool, int, str)):
            return [type(obj).__name__, obj]
        if isinstance(obj, float):
            return ["float", repr(obj)]
        if isinstance(obj, (bytes, bytearray)):
            return [type(obj).__name__, hashlib.sha256(obj).hexdigest()]
        if isinstance(obj, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
            return [qualname(obj), str(obj)]
        if isinstance(obj, torch.Tensor):
            return self.tensor(obj)
        if id(obj) in self.stack:
            return ["cycle", qualname(obj)]
        self.stack.add(id(obj))
        try:
            return self.container(obj)
        finally:
            self.stack.discard(id(obj))

    def container(self, obj):
        torch = self.torch
        name = qualname(obj)
        if isinstance(obj, dict):
            d = {"class": name, "items": [[self.describe(k), self.describe(v)]
                                          for k, v in obj.items()]}
            if getattr(obj, "_metadata", None) is not None:  # a state_dict's versions
                d["_metadata"] = self.describe(obj._metadata)  # pylint: disable=protected-access
            return d
        if isinstance(obj, (list, tuple)):
            return {"class": name, "items": [self.describe(v) for v in obj]}
        if isinstance(obj, (set, frozenset)):
            items = sorted(json.dumps(self.describe(v), sort_keys=True) for v in obj)
            return {"class": name, "items": items}
        if isinstance(obj, getattr(torch, "TypedStorage", ())) or \
                isinstance(obj, getattr(torch, "UntypedStorage", ())):
            data = bytes(obj.cpu().untyped() if hasattr(obj, "untyped") else obj.cpu())
            return {"class": name, "nbytes": len(data),
                    "sha256": hashlib.sha256(data).hexdigest()}
        if type(obj).__module__ == "numpy":
            return {"class": name, "repr": repr(obj)[:200]}
        if hasattr(obj, "dtype") and hasattr(obj, "tobytes"):  # a numpy array
            return {"class": name, "dtype": str(obj.dtype), "shape": list(obj.shape),
                    "sha256": hashlib.sha256(obj.tobytes()).hexdigest()}
        state = getattr(obj, "__dict__", None)
        return {"class": name, "state": None if state is None else self.describe(state)}


def loaded(torch, value):
    describer = Describer(torch)
    description = describer.describe(value)
    text = json.dumps(description, sort_keys=True, separators=(",", ":"))
    return {"outcome": "loaded", "type": qualname(value), "tensors": describer.tensors,
            "digest": hashlib.sha256(text.encode()).hexdigest()}


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def refused(error, path):
    """The exception's type and its message's gist, with no path or terminal colours."""
    text = ANSI.sub("", str(error))
    for p in sorted({path, os.path.realpath(path)}, key=len, reverse=True):
        text = text.replace(p, "<file>")
    marker = "WeightsUnpickler error:"
    if marker in text:  # torch's weights_only refusal: the sentence that names what it refused
        text = text[text.index(marker):]
    text = " ".join(text.split("\n\n")[0].split())
    return {"outcome": "refused", "error": type(error).__name__, "reason": text[:REASON_CHARS]}


def attempt(torch, path, call):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return loaded(torch, call())
    except Exception as e:  # pylint: disable=broad-except  (every failure is an outcome)
        return refused(e, path)


# ---------------------------------------------------------------------------------------------
# A fixture's record

SCAN_ERRORS = ("CheckpointScanError", "UnsafeCheckpointError", "DigestMismatchError",
               "ScanUnavailableError")


def status(stl, wo):
    """Whether scan_then_load did what torch.load(weights_only=True) does (module doc)."""
    if stl["outcome"] == "refused" and stl["error"] in SCAN_ERRORS:
        return "BUG: scan_then_load did not pass the file to torch (%s)" % stl["error"]
    if stl["outcome"] == "loaded" and wo["outcome"] == "loaded":
        return "same" if stl == wo else "BUG: scan_then_load returns other values than torch.load"
    if stl["outcome"] == "refused" and wo["outcome"] == "refused":
        return "refused" if stl == wo else "BUG: scan_then_load and torch.load fail differently"
    if wo["outcome"] == "loaded":
        return "BUG: torch.load(weights_only=True) loads it, scan_then_load does not"
    return "BUG: scan_then_load loads what torch.load(weights_only=True) refuses"


def refused_by(wo):
    """Who refused: torch's weights_only unpickler (a global or an opcode it does not allow),
    or torch itself (it cannot read the file with either setting, e.g. a newer torch's)."""
    return ("weights_only unpickler" if wo["reason"].startswith("WeightsUnpickler error")
            else "torch")


def check_record(r):
    """Why record R (a line of this script's output) breaks the invariant, or None: the
    scan passed the file and scan_then_load gave what torch.load(weights_only=True) gives, a
    load with the same digest or the same refusal, with its reason."""
    stl, wo = r.get("scan_then_load") or {}, r.get("torch_wo") or {}
    if r.get("verdict") != "SAFE":
        return "ckptscan's verdict is %s, the manifest's SAFE" % r.get("verdict")
    if r.get("status") != status(stl, wo):
        return "status %r, but its outcomes say %r" % (r.get("status"), status(stl, wo))
    if r["status"] == "same":
        return None
    if r["status"] == "refused":
        if not stl.get("reason") or r.get("refused_by") != refused_by(wo):
            return "a refusal without its reason or who refused (refused_by)"
        return None
    return r["status"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fixtures", required=True)
    scanner = ap.add_mutually_exclusive_group(required=True)
    scanner.add_argument("--ckptscan", help="scan with this CLI (scan_then_load's ckptscan=)")
    scanner.add_argument("--server", help="scan with this ckptscand (scan_then_load's server=)")
    ap.add_argument("--out", help="write the lines here (default: stdout)")
    args = ap.parse_args()
    fixtures = os.path.abspath(args.fixtures)

    sys.path.insert(0, HERE)
    import torch  # pylint: disable=import-outside-toplevel
    import ckptscan_client  # pylint: disable=import-outside-toplevel

    safe = expected_safe(fixtures)
    if args.server:
        with ckptscan_client.ScanClient(args.server, timeout=60) as client:
            entries = scan_with_daemon(client, fixtures, safe)
        how = {"server": args.server}  # an address: scan_then_load makes its own client
    else:
        entries = scan_with_cli(os.path.abspath(args.ckptscan), fixtures, safe)
        how = {"ckptscan": os.path.abspath(args.ckptscan)}
    unscanned = [r for r, e in entries.items() if e is None]
    if unscanned:
        print("scan_then_load_matrix: no report for %s" % unscanned, file=sys.stderr)
        return 2
    chosen = torch_loadable(entries)

    records = []
    for rel in chosen:
        path = os.path.join(fixtures, rel)
        entry = entries[rel]
        r = {"fixture": rel, "sha256": entry.get("sha256"), "format": entry["format"],
             "verdict": entry["verdict"]}
        r["scan_then_load"] = attempt(torch, path, lambda p=path: ckptscan_client.scan_then_load(
            p, map_location="cpu", **how))
        r["torch_wo"] = attempt(torch, path, lambda p=path: torch.load(
            p, map_location="cpu", weights_only=True))
        if entry["verdict"] == "SAFE":
            r["torch"] = attempt(torch, path, lambda p=path: torch.load(
                p, map_location="cpu", weights_only=False))
        else:
            r["torch"] = {"outcome": "not run", "reason": "the scan says " + entry["verdict"]}
        r["status"] = status(r["scan_then_load"], r["torch_wo"])
        if r["status"] == "refused":
            r["refused_by"] = refused_by(r["torch_wo"])
        records.append(r)

    counts = {}
    for r in records:
        key = r["status"] if not r["status"].startswith("BUG") else "bug"
        counts[key] = counts.get(key, 0) + 1
    meta = {"python": "%d.%d" % sys.version_info[:2], "torch": torch.__version__,
            "via": "server" if args.server else "cli", "expected_safe": len(safe),
            "torch_loadable": len(chosen), "status": counts}
    lines = [json.dumps({"meta": meta}, sort_keys=True)]
    lines += [json.dumps(r, sort_keys=True) for r in records]
    text = "\n".join(lines) + "\n"
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    bugs = [r for r in records if r["status"].startswith("BUG")]
    for r in bugs:
        print("scan_then_load_matrix: %s: %s" % (r["fixture"], r["status"]), file=sys.stderr)
    print("scan_then_load_matrix: torch %s, %d fixtures expected SAFE, %d torch files: %s"
          % (torch.__version__, len(safe), len(chosen),
             ", ".join("%d %s" % (v, k) for k, v in sorted(counts.items()))), file=sys.stderr)
    return 1 if bugs else 0


if __name__ == "__main__":
    sys.exit(main())
