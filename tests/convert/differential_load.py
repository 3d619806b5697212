#!/usr/bin/python3
"""What the real loaders return for the differential's files: one JSON line per (file, mode).

    differential_load.py --dir DIR [--modes torch,torch_wo] < names

Run with a Python that has torch and numpy (Debian 12's /usr/bin/python3 for torch 1.13, the
Debian 13 root's python3 for torch 2.6). For a .pt file, modes `torch` (torch.load with
weights_only=False) and `torch_wo` (weights_only=True), both with map_location="cpu"; for an
.npz, `numpy` (numpy.load, every key of NpzFile.files read by NpzFile[key]). The files are
the generator's own (differential_gen.py): plain data, no payloads.

A record: {"file", "mode", "ok": true, "tensors": [...]} or {"file", "mode", "ok": false,
"error"}. Tensors are every tensor or array reachable through dicts, lists and tuples (their
subclasses too: OrderedDict, Counter, defaultdict; torch.Size is not a container), named by
their key path (str(key) joined with '.'), in iteration order: {"name", "dtype", "shape",
"sha256"} (the bytes in C order; quantized: of int_repr(), with "q" holding the scheme and the
parameters), or "layout"/"device" for a tensor without plain data. A container that holds
itself makes the names endless: the record is not ok (error "cycle").
"""
import argparse
import hashlib
import json
import os
import signal
import sys
import warnings

MAX_STEPS = 1_000_000


class Cycle(Exception):
    pass


def raw_bytes(torch, t):
    t = t.detach().cpu().contiguous().reshape(-1)
    return t.view(torch.uint8).numpy().tobytes()


def tensor_record(torch, name, t):
    r = {"name": name, "dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape)}
    if t.layout != torch.strided:
        r["layout"] = str(t.layout).replace("torch.", "")
        return r
    if t.device.type != "cpu":
        r["device"] = t.device.type
        return r
    if t.is_quantized:
        scheme = t.qscheme()
        q = {"scheme": str(scheme).replace("torch.", "")}
        if scheme in (torch.per_tensor_affine, torch.per_tensor_symmetric):
            q["scale"] = float(t.q_scale()).hex()
            q["zero_point"] = int(t.q_zero_point())
        else:
            s, z = t.q_per_channel_scales(), t.q_per_channel_zero_points()
            q["scales"] = [str(s.dtype).replace("torch.", ""),
                           hashlib.sha256(raw_bytes(torch, s)).hexdigest()]
            q["zero_points"] = [str(z.dtype).replace("torch.", ""),
                                hashlib.sha256(raw_bytes(torch, z)).hexdigest()]
            q["axis"] = int(t.q_per_channel_axis())
        r["q"] = q
        t = t.int_repr()
    r["sha256"] = hashlib.sha256(raw_bytes(torch, t)).hexdigest()
    return r


def flatten(torch, obj):
    out = []
    stack = [("", obj, ())]
    steps = 0
    while stack:
        steps += 1
        if steps > MAX_STEPS:
            raise Cycle("more than %d paths" % MAX_STEPS)
        name, v, path = stack.pop()
        if isinstance(v, torch.Tensor):
            out.append(tensor_record(torch, name, v))
            continue
        if isinstance(v, dict):
            children = [(str(k), x) for k, x in v.items()]
        elif isinstance(v, (list, tuple)) and not isinstance(v, torch.Size):
            children = [(str(i), x) for i, x in enumerate(v)]
        else:
            continue
        if id(v) in path:
            raise Cycle("cycle")
        inner = path + (id(v),)
        for k, x in reversed(children):
            stack.append(((name + "." if name else "") + k, x, inner))
    return out


def load_npz(numpy, path):
    out = []
    seen = set()
    with numpy.load(path) as npz:
        for k in npz.files:
            if k in seen:
                continue
            seen.add(k)
            a = npz[k]
            out.append({"name": k, "dtype": str(a.dtype), "shape": list(a.shape),
                        "sha256": hashlib.sha256(numpy.ascontiguousarray(a).tobytes()).hexdigest()})
    return out


def alarm(signum, frame):
    raise TimeoutError("timeout")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--modes", default="torch,torch_wo")
    ap.add_argument("--timeout", type=int, default=20)
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    import numpy
    import torch
    torch.set_num_threads(1)
    signal.signal(signal.SIGALRM, alarm)
    modes = a.modes.split(",")
    for name in sys.stdin.read().split():
        path = os.path.join(a.dir, name)
        for mode in (["numpy"] if name.endswith(".npz") else modes):
            rec = {"file": name, "mode": mode}
            signal.alarm(a.timeout)
            try:
                if mode == "numpy":
                    rec["tensors"] = load_npz(numpy, path)
                else:
                    obj = torch.load(path, map_location="cpu", weights_only=(mode == "torch_wo"))
                    rec["tensors"] = flatten(torch, obj)
                rec["ok"] = True
            except BaseException as e:  # noqa: B902  the record says what the loader raised
                if isinstance(e, KeyboardInterrupt):
                    raise
                rec["ok"] = False
                rec["error"] = ("%s: %s" % (type(e).__name__, e))[:300]
            finally:
                signal.alarm(0)
            sys.stdout.write(json.dumps(rec, sort_keys=True) + "\n")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
