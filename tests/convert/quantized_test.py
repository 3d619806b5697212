#!/usr/bin/python3
"""Quantized checkpoints through `ckptscan convert`, against what torch recorded.

    quantized_test.py --ckptscan build/clients/ckptscan --fixtures tests/fixtures/quantized

The fixtures and expectations.json come from tests/fixtures/quantized/gen_quantized.py (torch
1.13, and torch 2.6 in a Debian 13 root). Stdlib only; when /usr/bin/python3 has torch, the
rebuilt quantized tensors are also compared with torch's dequantize() of the originals (printed
either way). Every file converts with --dtype keep, --dtype bf16 and --dtype bf16
--cast-quantized, and:

  torch-quantized  NAME holds int_repr() (I8/U8/I32, same shape, same SHA-256), NAME.scale the
                   scale (F64 [] with the pickled double's bits, or the per-channel scales),
                   NAME.zero_point and NAME.axis likewise; __metadata__ "ckptscan.quantized"
                   names the scheme and dtype; never cast to bf16;
  layers           a float32/float16 tensor under a quantized layer's prefix keeps its dtype and
                   bytes under bf16 (unless --cast-quantized), every other float tensor is BF16;
                   the report's conversion.quantized_layers counts the layers per layout and
                   the tensors kept;
  every tensor     the dtype and bytes torch recorded (keep), nothing else in the output;
  refused          a tensor recorded as refused (packed quint4x2) fails the conversion with
                   exit 2, naming it, and writes nothing.
"""
import argparse
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from roundtrip_test import QDATA, ST, check, failures, read_safetensors  # noqa: E402


def sha(b):
    return hashlib.sha256(b).hexdigest()


def convert(ckptscan, src, out, flags):
    r = subprocess.run([ckptscan, "convert", "-f", "json", src, "-o", out] + flags,
                       capture_output=True, text=True)
    report = json.loads(r.stdout) if r.stdout.strip() else None
    return r.returncode, report, r.stderr


def layer_of(name, layers):
    best = None
    for p in layers:
        if (p == "" or name.startswith(p + ".")) and (best is None or len(p) > len(best)):
            best = p
    return best


def check_quantized(label, t, got, quantized_meta):
    name = t["name"]
    names = [name, name + ".scale", name + ".zero_point"]
    if not check(all(n in got for n in names), f"{label}: {name}: outputs {names} not all there"):
        return names
    dt, shape, raw = got[name]
    check(dt == QDATA[t["dtype"]] and shape == t["shape"] and sha(raw) == t["int_repr_sha256"],
          f"{label}: {name} is {dt} {shape}, want int_repr {QDATA[t['dtype']]} {t['shape']}")
    scale, zero = got[name + ".scale"], got[name + ".zero_point"]
    if "scale_hex" in t:
        check(scale == ("F64", [], bytes.fromhex(t["scale_hex"])),
              f"{label}: {name}.scale is {scale[:2]} {scale[2].hex()}, want F64 [] "
              f"{t['scale_hex']}")
        check(zero == ("I64", [], struct.pack("<q", t["zero_point"])),
              f"{label}: {name}.zero_point is {zero[:2]} {zero[2].hex()}, want {t['zero_point']}")
    else:
        names.append(name + ".axis")
        for got_t, want, what in ((scale, t["scales"], "scale"), (zero, t["zero_points"],
                                                                   "zero_point")):
            check(got_t[0] == ST[want["dtype"]] and got_t[1] == want["shape"] and
                  sha(got_t[2]) == want["sha256"],
                  f"{label}: {name}.{what} is {got_t[:2]}, want {want}")
        check(got.get(name + ".axis") == ("I64", [], struct.pack("<q", t["axis"])),
              f"{label}: {name}.axis is {got.get(name + '.axis')}, want {t['axis']}")
    check(quantized_meta.get(name) == {"scheme": t["qscheme"], "dtype": t["dtype"]},
          f"{label}: __metadata__ ckptscan.quantized[{name!r}] is {quantized_meta.get(name)}, "
          f"want {t['qscheme']} {t['dtype']}")
    return names


def torch_round_trip(label, src, tensors, got):
    """With torch: the tensor rebuilt from the output dequantizes to the original's values."""
    import torch
    original = dict(flatten_loaded(torch.load(src)))
    n = 0
    for t in tensors:
        if "qscheme" not in t:
            continue
        name = t["name"]

        def tensor(key):
            dt, shape, raw = got[key]
            np_dtype = {"I8": torch.int8, "U8": torch.uint8, "I32": torch.int32,
                        "F64": torch.float64, "F32": torch.float32, "I64": torch.int64}[dt]
            return torch.frombuffer(bytearray(raw), dtype=np_dtype).reshape(shape)
        data, scale, zero = tensor(name), tensor(name + ".scale"), tensor(name + ".zero_point")
        if name + ".axis" in got:
            rebuilt = torch._make_per_channel_quantized_tensor(data, scale, zero,
                                                               int(tensor(name + ".axis")))
        else:
            rebuilt = torch._make_per_tensor_quantized_tensor(data, float(scale), int(zero))
        check(torch.equal(rebuilt.dequantize(), original[name].dequantize()),
              f"{label}: {name} rebuilt from the output dequantizes differently from torch's")
        n += 1
    return n


def flatten_loaded(obj):
    import torch
    stack = [("", obj)]
    while stack:
        name, v = stack.pop(0)
        if isinstance(v, torch.Tensor):
            yield name, v
        elif isinstance(v, dict):
            stack[0:0] = [((f"{name}.{k}" if name else str(k)), x) for k, x in v.items()]
        elif isinstance(v, (list, tuple)):
            stack[0:0] = [((f"{name}.{i}" if name else str(i)), x) for i, x in enumerate(v)]


def check_sets(a, files, tmp):
    """A sharded set whose quantized layer is split over its shards: recognised from the
    index's names, so each shard keeps that layer's float tensors under bf16."""
    sets = {}
    for rel, exp in files.items():
        if "shard_of" in exp:
            sets.setdefault(exp["shard_of"], []).append(rel)
    n = 0
    for index, shards in sorted(sets.items()):
        for flags in (["--dtype", "bf16"], ["--dtype", "bf16", "--cast-quantized"]):
            label = f"{index} {' '.join(flags)}"
            outdir = os.path.join(tmp, f"set-{len(flags)}")
            rc, report, err = convert(a.ckptscan, os.path.join(a.fixtures, index), outdir, flags)
            if not check(rc == 0, f"{label}: exit {rc}: {err.strip()}"):
                continue
            n += 1
            cast = "--cast-quantized" in flags
            kept = 0
            new_index = json.load(open(os.path.join(outdir, "model.safetensors.index.json")))
            for rel in sorted(shards):
                layers = files[rel]["layers"]
                for t in files[rel]["tensors"]:
                    name = t["name"]
                    out = os.path.join(outdir, new_index["weight_map"][name])
                    dt = read_safetensors(out)[1][name][0]
                    is_float = t["dtype"] in ("float32", "float16")
                    in_layer = layer_of(name, layers) is not None
                    if is_float and in_layer and not cast:
                        kept += 1
                        check(dt == ST[t["dtype"]], f"{label}: {name} is {dt}, want it kept")
                    elif is_float:
                        check(dt == "BF16", f"{label}: {name} is {dt}, want BF16")
            # The index's entry sums its shards' dtypes.
            summed = {}
            for f in report["files"][1:]:
                for d in f["conversion"]["dtypes"]:
                    key = (d["source"], d["written"], d["how"])
                    summed[key] = summed.get(key, 0) + d["tensors"]
            index_dtypes = {(d["source"], d["written"], d["how"]): d["tensors"]
                            for d in report["files"][0]["conversion"]["dtypes"]}
            check(summed and index_dtypes == summed,
                  f"{label}: the index's dtypes {index_dtypes} are not its shards' {summed}")
            layout = next(iter(files[shards[0]]["layers"].items()))
            got = report["files"][0]["conversion"].get("quantized_layers")
            want = [{"layout": layout[1], "layers": 1, "kept": kept, "example": layout[0]}]
            check(got == want, f"{label}: the set's quantized_layers {got}, want {want}")
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckptscan", required=True)
    ap.add_argument("--fixtures", required=True, help="tests/fixtures/quantized")
    a = ap.parse_args()
    files = json.load(open(os.path.join(a.fixtures, "expectations.json")))["files"]
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
    conversions = round_trips = 0
    with tempfile.TemporaryDirectory() as tmp:
        for rel, exp in sorted(files.items()):
            if "shard_of" in exp:
                continue  # converted as its set, below
            src = os.path.join(a.fixtures, rel)
            tensors = exp["tensors"]
            if "refused" in exp:
                out = os.path.join(tmp, "refused.safetensors")
                rc, _, err = convert(a.ckptscan, src, out, [])
                check(rc == 2 and repr(exp["refused"]) in err.replace('"', "'") or
                      f"'{exp['refused']}'" in err,
                      f"{rel}: exit {rc}, want 2 naming {exp['refused']!r}: {err.strip()}")
                check(not os.path.exists(out), f"{rel}: refused, yet an output exists")
                continue
            layers = exp.get("layers", {})
            for flags in (["--dtype", "keep"], ["--dtype", "bf16"],
                          ["--dtype", "bf16", "--cast-quantized"]):
                label = f"{rel} {' '.join(flags)}"
                out = os.path.join(tmp, f"{len(flags)}-{flags[1]}.safetensors")
                rc, report, err = convert(a.ckptscan, src, out, flags)
                bf16 = flags[1] == "bf16"
                cast = "--cast-quantized" in flags
                declared = exp.get("declared")
                if declared and not layers and bf16 and not cast:
                    # config.json declares a quantization whose layers convert does not know.
                    check(rc == 2 and f'quant_method "{declared}"' in err and
                          not os.path.exists(out),
                          f"{label}: exit {rc}, want 2 naming quant_method {declared}: "
                          f"{err.strip()}")
                    continue
                if not check(rc == 0, f"{label}: exit {rc}: {err.strip()}"):
                    continue
                conversions += 1
                conv = report["files"][0]["conversion"]
                check(conv.get("declared_quantization") == declared,
                      f"{label}: declared_quantization {conv.get('declared_quantization')}, "
                      f"want {declared}")
                meta, got = read_safetensors(out)
                qmeta = json.loads(meta.get("ckptscan.quantized", "{}"))
                expected_names = set()
                kept = {}
                for t in tensors:
                    if "qscheme" in t:
                        expected_names.update(check_quantized(label, t, got, qmeta))
                        continue
                    name = t["name"]
                    expected_names.add(name)
                    if not check(name in got, f"{label}: {name} missing"):
                        continue
                    dt, shape, raw = got[name]
                    check(shape == t["shape"], f"{label}: {name} shape {shape} != {t['shape']}")
                    layer = layer_of(name, layers)
                    is_float = t["dtype"] in ("float32", "float16")
                    if layer is not None and bf16 and is_float and not cast:
                        kept[layers[layer]] = kept.get(layers[layer], 0) + 1
                    if bf16 and is_float and (layer is None or cast):
                        check(dt == "BF16", f"{label}: {name} is {dt}, want BF16")
                    else:
                        check(dt == ST[t["dtype"]] and sha(raw) == t["sha256"],
                              f"{label}: {name} is {dt}, want {ST[t['dtype']]} with torch's "
                              "bytes")
                extra = sorted(set(got) - expected_names)
                check(not extra, f"{label}: output holds {extra}, which torch did not return")
                check(set(qmeta) == {t["name"] for t in tensors if "qscheme" in t},
                      f"{label}: ckptscan.quantized lists {sorted(qmeta)}")
                conv = report["files"][0]["conversion"]
                want_layers = {}
                for p, layout in sorted(layers.items()):
                    w = want_layers.setdefault(layout, {"layout": layout, "layers": 0,
                                                        "kept": kept.get(layout, 0),
                                                        "example": p})
                    w["layers"] += 1
                check(conv.get("quantized_layers", []) == list(want_layers.values()),
                      f"{label}: quantized_layers {conv.get('quantized_layers')} != "
                      f"{list(want_layers.values())}")
                check(sum(d["tensors"] for d in conv["dtypes"]) == len(got),
                      f"{label}: conversion.dtypes counts {conv['dtypes']}, output has {len(got)}")
                if have_torch and flags[1] == "keep":
                    round_trips += torch_round_trip(label, src, tensors, got)
                os.unlink(out)
        conversions += check_sets(a, files, tmp)
    for f in failures:
        print("FAIL", f)
    print(f"{conversions} conversions of {len(files)} quantized fixtures checked against "
          f"torch's records; {len(failures)} failures")
    if have_torch:
        print(f"torch round trip: {round_trips} quantized tensors rebuilt from the outputs "
              "dequantize exactly as the originals")
    else:
        print("torch round trip not run: /usr/bin/python3 has no torch here (scripts/setup.sh "
              "--dev installs it); the recorded int_repr, scales and zero points were compared")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
