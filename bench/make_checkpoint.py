#!/usr/bin/python3
"""Writes a benchmark checkpoint with torch.save (Debian's python3-torch; not committed).

    /usr/bin/python3 bench/make_checkpoint.py OUT.pt --tensors 100 --bytes 2G [--legacy]

Tensors are float32, equal-sized, named like a transformer's state dict, filled cheaply (the
content does not matter to a scanner; the layout does).
"""
import argparse
import collections

import torch


def parse_size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * units[s[-1]]) if s[-1] in units else int(s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--tensors", type=int, default=100)
    ap.add_argument("--bytes", default="16M")
    ap.add_argument("--legacy", action="store_true")
    args = ap.parse_args()
    per = max(1, parse_size(args.bytes) // args.tensors // 4)
    sd = collections.OrderedDict()
    for i in range(args.tensors):
        t = torch.empty(per, dtype=torch.float32)
        t.fill_(float(i))
        sd["model.layers.%d.%s.weight" % (i // 4, ("q_proj", "k_proj", "v_proj", "mlp")[i % 4])] = t
    torch.save(sd, args.out, _use_new_zipfile_serialization=not args.legacy)


if __name__ == "__main__":
    main()
