#!/usr/bin/python3
"""The Python way to convert a checkpoint to safetensors, as Hugging Face's converter does it
(Debian's python3-torch; no safetensors package, so a small writer of the same format).

    /usr/bin/python3 bench/hf_convert_baseline.py IN.pt OUT.safetensors [--dtype keep|bf16]

torch.load(map_location="cpu", weights_only=True), unwrap "state_dict", make every tensor
contiguous, optionally cast float32/float16 to bfloat16, then write like
safetensors.torch.save_file: its _flatten turns every tensor into a bytes object first
(`_tobytes`: one copy of the whole model next to the loaded one), then the header and the
bytes are written. Not done here, unlike convert.py: deduplicating shared tensors (a
checkpoint from make_checkpoint.py has none) and reloading the output to compare.
"""
import argparse
import json
import struct
import sys

import torch

DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16",
          torch.bfloat16: "BF16", torch.int64: "I64", torch.int32: "I32", torch.int16: "I16",
          torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL"}


def tobytes(t):
    """The tensor's bytes, little-endian, as safetensors' _tobytes gives them."""
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: same bits as int16
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def save_file(tensors, path, metadata):
    flat = [(k, DTYPES[v.dtype], list(v.shape), tobytes(v)) for k, v in sorted(tensors.items())]
    header, pos = {"__metadata__": metadata}, 0
    for name, dtype, shape, data in flat:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [pos, pos + len(data)]}
        pos += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, data in flat:
            f.write(data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--dtype", choices=("keep", "bf16"), default="keep")
    args = ap.parse_args()
    loaded = torch.load(args.input, map_location="cpu", weights_only=True)
    if "state_dict" in loaded:
        loaded = loaded["state_dict"]
    loaded = {k: v.contiguous() for k, v in loaded.items()}
    if args.dtype == "bf16":
        loaded = {k: v.to(torch.bfloat16) if v.dtype in (torch.float32, torch.float16) else v
                  for k, v in loaded.items()}
    save_file(loaded, args.output, {"format": "pt"})


if __name__ == "__main__":
    sys.exit(main())
