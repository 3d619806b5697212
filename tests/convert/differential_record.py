#!/usr/bin/python3
"""Records what torch 2.6 and numpy 2.2 (Debian 13) return for the conversion differential's
files, into differential_trixie.json (read by differential_test.py in CI, which has only Debian
12's torch 1.13).

    sudo /usr/bin/python3 tests/convert/differential_record.py [--root DIR] [--count N]

DIR is a Debian 13 root with python3-torch and python3-numpy (scripts/modern_root.sh; default
~/.cache/ckptscan/trixie). The files are generated here (differential_gen.py, the seed and count
CI uses), copied into DIR/tmp, and loaded there by differential_load.py with the root's python3
(torch.load weights_only False and True, numpy.load for an .npz). Per file the record keeps its
SHA-256 and, per load, whether it succeeded and the digest of the tensors it returned
(differential_test.digest), or the start of the error. Needs root (chroot).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import differential_gen  # noqa: E402
import differential_test  # noqa: E402

ENV = ["env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8",
       "PYTHONDONTWRITEBYTECODE=1", "OMP_NUM_THREADS=1"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.path.expanduser("~/.cache/ckptscan/trixie"))
    ap.add_argument("--count", type=int, default=differential_gen.COUNT)
    ap.add_argument("--seed", type=int, default=differential_gen.SEED)
    ap.add_argument("--out", default=os.path.join(HERE, "differential_trixie.json"))
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("differential_record.py: chroot needs root", file=sys.stderr)
        return 1
    root = os.path.abspath(a.root)
    with tempfile.TemporaryDirectory(dir=os.path.join(root, "tmp")) as tmp:
        files = differential_gen.generate(tmp, a.seed, a.count)
        shutil.copy(os.path.join(HERE, "differential_load.py"), tmp)
        inside = "/tmp/" + os.path.basename(tmp)
        versions = subprocess.run(
            ["chroot", root] + ENV + ["python3", "-c",
                                      "import torch, numpy; print(torch.__version__, "
                                      "numpy.__version__)"],
            capture_output=True, text=True, check=True).stdout.split()[-2:]
        r = subprocess.run(["chroot", root] + ENV + ["python3", inside + "/differential_load.py",
                                                     "--dir", inside],
                           input="\n".join(sorted(files)), capture_output=True, text=True,
                           check=True)
    loads = {}
    for line in r.stdout.splitlines():
        if not line.startswith("{"):
            continue  # the root's libraries may print to stdout (UCX)
        rec = json.loads(line)
        entry = {"ok": rec["ok"]}
        if rec["ok"]:
            entry["digest"] = differential_test.digest(rec["tensors"])
        else:
            entry["error"] = rec["error"][:100]
        loads.setdefault(rec["file"], {})[rec["mode"]] = entry
    out = {"seed": a.seed, "count": a.count, "torch": versions[0], "numpy": versions[1],
           "files": {n: {"sha256": files[n]["sha256"], "loads": loads.get(n, {})}
                     for n in sorted(files)}}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=0, sort_keys=True, separators=(",", ":"))
        f.write("\n")
    ok = sum(1 for v in loads.values() for x in v.values() if x["ok"])
    print("%d files, %d loads succeeded of %d (torch %s, numpy %s)" % (
        len(files), ok, sum(len(v) for v in loads.values()), versions[0], versions[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
