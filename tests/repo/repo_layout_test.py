#!/usr/bin/python3
"""A whole model repository through `ckptscan scan`: every file gets a verdict by its content.

    repo_layout_test.py --ckptscan build/clients/ckptscan --fixtures tests/fixtures/repo

The fixture repository (tests/fixtures/repo/gen_repo.py: torch.save, sentencepiece's trainer,
zipfile, a real PNG) is copied to a temporary folder, a .git folder is added (git refuses to
commit one), and:

  benign     the repository and its Hugging Face cache copy scan with exit 0 under --fail-on
             dangerous; every file has the kind and verdict expectations.json records; .git,
             blobs/ and refs/ are skipped and listed; no file is listed twice;
  malicious  one malicious member at a time (a training_args.bin pickle, a pickle named
             README.md, a payload inside the zip, an evil chat template in
             tokenizer_config.json and in chat_template.jinja, a zip appended to a JSON, a PNG,
             a text file and a benign pickle) exits 1 and names it;
  selection  --exclude '*.json' still scans the index (and says so); --exclude config.json
             matches sub/config.json; a pattern that matches nothing is warned about;
             --include '*.bin' scans the checkpoints only, and the index;
  unknown    an unknown binary is ERROR by default, SUSPICIOUS with --unknown warn, skipped
             with --unknown skip;
  cache      a blob whose bytes differ from its SHA-256 name is ERROR (digest_mismatch); two
             snapshots of the same blob scan it once;
  manifest   a file the manifest does not list is manifest.unlisted;
  reports    JSON has summary and skipped, SARIF has invocations with the exit code and no
             error-level result for a data file, JUnit counts the skipped paths;
  server     through a ckptscand (--ckptscand, or the one beside ckptscan) the benign repository and the evil
             template give the same report, file by file, as the embedded sandbox.

The malicious files are built here from harmless payloads and never loaded. Stdlib only.
"""
import argparse
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

failures = []


def check(ok, message):
    if not ok:
        failures.append(message)
        print("FAIL:", message)
    return ok


def scan(a, *args, cwd=None):
    r = subprocess.run([a.ckptscan, "scan"] + list(args), capture_output=True, text=True,
                       cwd=cwd)
    return r.returncode, r.stdout, r.stderr


def scan_json(a, *args, cwd=None):
    rc, out, err = scan(a, "--format", "json", *args, cwd=cwd)
    try:
        return rc, json.loads(out), err
    except ValueError:
        check(False, f"scan {args}: no JSON (exit {rc}): {out[:300]} {err[:300]}")
        return rc, {"files": [], "skipped": [], "summary": {}}, err


def by_rel(report, root):
    out = {}
    for f in report["files"]:
        rel = os.path.relpath(f["path"], root)
        check(rel not in out, f"{rel} is listed twice")
        out[rel] = f
    return out


# Harmless payloads: pickles that would call posix.system / builtins.eval on a constant.
EVIL_PICKLE = b"\x80\x02cposix\nsystem\nq\x00X\x02\x00\x00\x00idq\x01\x85q\x02Rq\x03."
EVIL_TEMPLATE = "{{ cycler.__init__.__globals__.os.popen('id').read() }}"


def make_repo(a, tmp, name="repo"):
    root = os.path.join(tmp, name)
    shutil.copytree(os.path.join(a.fixtures, "model"), root, symlinks=True)
    git = os.path.join(root, ".git")
    os.makedirs(os.path.join(git, "objects", "ab"))
    with open(os.path.join(git, "HEAD"), "w") as f:
        f.write("ref: refs/heads/main\n")
    with open(os.path.join(git, "objects", "ab", "cdef0123"), "wb") as f:
        f.write(b"x\x01" + bytes(range(256)))  # a loose object: zlib data, no format of ours
    return root


def benign(a, tmp, expect):
    root = make_repo(a, tmp)
    cache = os.path.join(tmp, "hf-cache")
    shutil.copytree(os.path.join(a.fixtures, "hf-cache"), cache, symlinks=True)
    rc, report, err = scan_json(a, "--fail-on", "dangerous", root, cache)
    check(rc == 0, f"benign repository: exit {rc}, want 0: {err.strip()}")
    files = by_rel(report, root)
    for rel, (kind, verdict) in expect["repository"].items():
        f = files.get(rel)
        if not check(f is not None, f"benign: {rel} was not scanned"):
            continue
        check(f["kind"] == kind and f["verdict"] == verdict,
              f"benign: {rel} is {f['kind']} {f['verdict']} ({f['format']}), want {kind} "
              f"{verdict}: {f['errors']} {f['findings']}")
    snap = os.path.join(cache, "models--ckptscan--tiny", "snapshots", expect["revision"])
    for rel, (kind, verdict) in expect["hf_cache_snapshot"].items():
        f = files.get(os.path.relpath(os.path.join(snap, rel), root))
        if check(f is not None, f"benign: cache snapshot {rel} was not scanned"):
            check(f["kind"] == kind and f["verdict"] == verdict,
                  f"benign: cache {rel} is {f['kind']} {f['verdict']}, want {kind} {verdict}")
    unexpected = [r for r in files if not r.startswith("..") and r not in expect["repository"]]
    check(not unexpected, f"benign: files scanned that should not be: {unexpected}")
    cache_files = [r for r in files if r.startswith("..")]
    check(len(cache_files) == len(expect["hf_cache_snapshot"]),
          f"benign: the cache gave {cache_files}, want the snapshot's files once each")
    skipped = {os.path.relpath(s["path"], root): s["reason"] for s in report["skipped"]}
    for want in [".git", "../hf-cache/models--ckptscan--tiny/blobs",
                 "../hf-cache/models--ckptscan--tiny/refs"]:
        check(want in skipped, f"benign: {want} is not listed as skipped: {skipped}")
    s = report["summary"]
    check(s["files"] == len(report["files"]) and s["skipped"] == len(report["skipped"]),
          f"benign: summary {s} does not count the report")
    kinds = {}
    for f in report["files"]:
        kinds[f["kind"]] = kinds.get(f["kind"], 0) + 1
    check(s["kinds"] == kinds, f"benign: summary kinds {s['kinds']}, counted {kinds}")
    # The same repository, text: no --exclude needed, and the kinds line.
    rc, out, err = scan(a, "--fail-on", "dangerous", root)
    check(rc == 0 and "kinds: " in out and "skipped: " in out,
          f"benign text report: exit {rc}: {out[-400:]}")
    return root


def malicious(a, tmp):
    cases = []

    def case(name, mutate, culprit, member=None):
        root = make_repo(a, tmp, name)
        mutate(root)
        rc, report, err = scan_json(a, "--fail-on", "dangerous", root)
        files = by_rel(report, root)
        f = files.get(culprit)
        ok = check(rc == 1, f"{name}: exit {rc}, want 1: {err.strip()}")
        if check(f is not None, f"{name}: {culprit} was not scanned"):
            check(f["verdict"] == "DANGEROUS",
                  f"{name}: {culprit} is {f['verdict']}: {f['findings']} {f['errors']}")
            if member is not None:
                members = [x["location"]["member"] for x in f["findings"]]
                check(any(member in m for m in members),
                      f"{name}: no finding names member {member}: {members}")
        others = [r for r, x in files.items() if x["verdict"] == "DANGEROUS" and r != culprit]
        check(not others, f"{name}: other files DANGEROUS: {others}")
        cases.append((name, ok))

    def write(root, rel, data, mode="wb"):
        with open(os.path.join(root, rel), mode) as f:
            f.write(data)

    case("training_args", lambda r: write(r, "training_args.bin", EVIL_PICKLE),
         "training_args.bin")
    case("pickle_named_readme", lambda r: write(r, "README.md", EVIL_PICKLE), "README.md")
    # Protocol 0: a pickle that is also valid ASCII text.
    case("text_pickle_named_readme",
         lambda r: write(r, "README.md", b"cposix\nsystem\n(S'id'\ntR."), "README.md")

    def evil_zip(r):
        with zipfile.ZipFile(os.path.join(r, "tiny-model.zip"), "w") as z:
            z.writestr("tiny/config.json", "{}\n")
            z.writestr("tiny/pytorch_model.bin", EVIL_PICKLE)
    case("payload_in_zip", evil_zip, "tiny-model.zip", member="tiny/pytorch_model.bin")

    def evil_tokenizer_config(r):
        p = os.path.join(r, "tokenizer_config.json")
        j = json.load(open(p))
        j["chat_template"] = [{"name": "default", "template": "{{ messages }}"},
                              {"name": "tool_use", "template": EVIL_TEMPLATE}]
        write(r, "tokenizer_config.json", json.dumps(j), "w")
    case("evil_template_json", evil_tokenizer_config, "tokenizer_config.json")
    case("evil_template_jinja", lambda r: write(r, "chat_template.jinja", EVIL_TEMPLATE, "w"),
         "chat_template.jinja")

    # Data files with a zip in their tail, which zipfile-based tools (and picklescan) open:
    # the zip's pickle is judged, whatever the data before it.
    def zip_tail(rel):
        def mutate(r):
            buf = io.BytesIO()
            with zipfile.ZipFile(buf, "w") as z:
                z.writestr("payload/data.pkl", EVIL_PICKLE)
            with open(os.path.join(r, rel), "ab") as f:
                f.write(buf.getvalue())
        return mutate
    for rel in ("config.json", "logo.png", "vocab.txt"):
        case("zip_after_" + rel.replace(".", "_"), zip_tail(rel), rel)
    # The same after a benign pickle (pickle.load and torch.load stop at its STOP).
    case("zip_after_pickle",
         lambda r: (write(r, "training_args.bin", b"\x80\x02}q\x00."),
                    zip_tail("training_args.bin")(r)), "training_args.bin")
    return cases


def selection(a, tmp):
    root = make_repo(a, tmp, "selection")
    os.makedirs(os.path.join(root, "sub"))
    shutil.copyfile(os.path.join(root, "config.json"), os.path.join(root, "sub", "config.json"))
    rc, report, err = scan_json(a, "--exclude", "*.json", root)
    files = by_rel(report, root)
    index = files.get("sharded/pytorch_model.bin.index.json")
    if check(index is not None, "--exclude '*.json' dropped the sharded index"):
        check(any(x["rule_id"] == "scan.selection" for x in index["findings"]),
              f"--exclude '*.json': the index does not say why it was scanned: {index}")
    check("config.json" not in files and "sub/config.json" not in files,
          "--exclude '*.json' kept a config.json")
    rc, report, err = scan_json(a, "--exclude", "config.json", "--exclude", "nothing-*.xyz",
                                root)
    files = by_rel(report, root)
    check("sub/config.json" not in files and "config.json" not in files,
          "--exclude config.json did not match sub/config.json")
    check("--exclude nothing-*.xyz matched nothing" in err,
          f"a pattern that matched nothing was not warned about: {err.strip()}")
    rc, report, err = scan_json(a, "--include", "*.bin", root)
    files = by_rel(report, root)
    want = {"pytorch_model.bin", "sharded/pytorch_model-00001-of-00002.bin",
            "sharded/pytorch_model-00002-of-00002.bin", "sharded/pytorch_model.bin.index.json"}
    check(set(files) == want, f"--include '*.bin' scanned {sorted(files)}, want {sorted(want)}")
    check(any(s["reason"] == "not matched by --include" for s in report["skipped"]),
          "--include: the other files are not listed as skipped")
    # A shard a pattern excludes is scanned all the same, and its skipped entry says so.
    rc, report, err = scan_json(a, "--exclude", "pytorch_model-00002-of-00002.bin", root)
    files = by_rel(report, root)
    check("sharded/pytorch_model-00002-of-00002.bin" in files, "an excluded shard was not scanned")
    check(any("but scanned: a shard of" in s["reason"] for s in report["skipped"]),
          f"the excluded shard's skipped entry does not say it was scanned: {report['skipped']}")


def unknown(a, tmp):
    root = os.path.join(tmp, "unknown")
    os.makedirs(root)
    with open(os.path.join(root, "blob.dat"), "wb") as f:
        f.write(b"\x00\x01\x02\x03binary")
    shutil.copyfile(os.path.join(a.fixtures, "model", "pytorch_model.bin"),
                    os.path.join(root, "pytorch_model.bin"))
    rc, report, _ = scan_json(a, root)
    f = by_rel(report, root).get("blob.dat", {})
    check(rc == 2 and f.get("kind") == "unknown" and f.get("verdict") == "ERROR",
          f"unknown binary by default: exit {rc}, {f}")
    rc, report, _ = scan_json(a, "--unknown", "warn", root)
    f = by_rel(report, root).get("blob.dat", {})
    check(rc == 1 and f.get("verdict") == "SUSPICIOUS" and
          [x["rule_id"] for x in f.get("findings", [])] == ["file.unknown_format"],
          f"--unknown warn: exit {rc}, {f}")
    rc, report, _ = scan_json(a, "--unknown", "warn", "--fail-on", "dangerous", root)
    check(rc == 0, f"--unknown warn --fail-on dangerous: exit {rc}")
    rc, report, _ = scan_json(a, "--unknown", "skip", root)
    check(rc == 0 and "blob.dat" not in by_rel(report, root) and
          any(s["path"].endswith("blob.dat") for s in report["skipped"]),
          f"--unknown skip: exit {rc}, skipped {report['skipped']}")


def cache(a, tmp, expect):
    cache_root = os.path.join(tmp, "cache-attacks")
    shutil.copytree(os.path.join(a.fixtures, "hf-cache"), cache_root, symlinks=True)
    repo = os.path.join(cache_root, "models--ckptscan--tiny")
    snap = os.path.join(repo, "snapshots", expect["revision"])
    # A second revision linking to the same blobs: each blob is scanned once.
    other = os.path.join(repo, "snapshots", "f" * 40)
    os.makedirs(other)
    for name in os.listdir(snap):
        os.symlink(os.readlink(os.path.join(snap, name)), os.path.join(other, name))
    rc, report, err = scan_json(a, "--fail-on", "dangerous", cache_root)
    check(rc == 0 and len(report["files"]) == len(expect["hf_cache_snapshot"]),
          f"two snapshots of the same blobs: exit {rc}, {len(report['files'])} files")
    check(sum("the same file as" in s["reason"] for s in report["skipped"]) ==
          len(expect["hf_cache_snapshot"]),
          f"the second snapshot's links are not listed as the same files: {report['skipped']}")
    # A blob whose bytes are not its name's digest.
    blob = os.path.realpath(os.path.join(snap, "pytorch_model.bin"))
    data = bytearray(open(blob, "rb").read())
    data[-30] ^= 1  # inside the zip's central directory comment-free tail: still a checkpoint
    open(blob, "wb").write(bytes(data))
    rc, report, err = scan_json(a, "--fail-on", "dangerous", snap)
    f = by_rel(report, snap).get("pytorch_model.bin", {})
    codes = [e["code"] for e in f.get("errors", [])]
    check(rc == 2 and "digest_mismatch" in codes,
          f"a changed blob: exit {rc}, errors {codes}")


def manifest(a, tmp):
    root = os.path.join(tmp, "manifest")
    os.makedirs(root)
    for name in ["pytorch_model.bin", "config.json"]:
        shutil.copyfile(os.path.join(a.fixtures, "model", name), os.path.join(root, name))
    digest = hashlib.sha256(open(os.path.join(root, "pytorch_model.bin"), "rb").read())
    with open(os.path.join(root, "SHA256SUMS"), "w") as f:
        f.write(f"{digest.hexdigest()}  pytorch_model.bin\n")
    rc, report, err = scan_json(a, "--manifest", os.path.join(root, "SHA256SUMS"))
    files = {os.path.basename(f["path"]): f for f in report["files"]}
    check(sorted(files) == ["config.json", "pytorch_model.bin"],
          f"--manifest: files {sorted(files)} (each once, the manifest itself left out)")
    rules = [x["rule_id"] for x in files.get("config.json", {}).get("findings", [])]
    check("manifest.unlisted" in rules, f"--manifest: config.json unlisted not reported: {rules}")
    check(not any(x["rule_id"] == "manifest.unlisted"
                  for x in files.get("pytorch_model.bin", {}).get("findings", [])),
          "--manifest: a listed file is reported unlisted")


def reports(a, tmp, root):
    sarif_path = os.path.join(tmp, "out.sarif")
    rc, out, err = scan(a, "--format", "junit", "--fail-on", "dangerous", "--sarif-output",
                        sarif_path, root)
    check(rc == 0, f"junit: exit {rc}")
    check('<skipped message="git metadata' in out and ' skipped="1"' in out,
          f"junit: .git not counted as skipped: {out[:300]}")
    sarif = json.load(open(sarif_path))
    run = sarif["runs"][0]
    check(run.get("invocations") == [{"executionSuccessful": True, "exitCode": 0}],
          f"sarif invocations: {run.get('invocations')}")
    levels = [(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"], r["level"])
              for r in run["results"]]
    check(not any(uri.endswith(".json") and level == "error" for uri, level in levels),
          f"sarif: an error-level result for a JSON file: {levels}")


def server(a, tmp, root):
    daemon = a.ckptscand or os.path.join(os.path.dirname(a.ckptscan), "ckptscand")
    if not os.access(daemon, os.X_OK):
        print(f"skip server: no ckptscand at {daemon} (give --ckptscand)")
        return
    d = os.path.join(tmp, "daemon")
    os.mkdir(d)
    log = open(os.path.join(d, "log"), "w+")
    proc = subprocess.Popen([daemon, "--socket", os.path.join(d, "s.sock"), "--state-dir",
                             os.path.join(d, "state")], stderr=log)
    try:
        for _ in range(200):
            log.seek(0)
            if '"event":"listening"' in log.read():
                break
            if proc.poll() is not None:
                break
            subprocess.run(["sleep", "0.05"])
        else:
            check(False, "server: ckptscand did not start listening")
            return
        sock = "unix:" + os.path.join(d, "s.sock")

        def same(name, target):
            rc_l, local, _ = scan_json(a, "--fail-on", "dangerous", target)
            rc_s, remote, err = scan_json(a, "--fail-on", "dangerous", "--server", sock, target)
            check(rc_l == rc_s, f"server: {name}: exit {rc_s} through the daemon, {rc_l} locally: "
                                f"{err.strip()[:300]}")
            key = lambda f: (f["format"], f["kind"], f["verdict"],
                             sorted((x["rule_id"], x["location"]["member"], x["location"]["offset"])
                                    for x in f["findings"]),
                             sorted(e["code"] for e in f["errors"]))
            lf = {f["path"]: key(f) for f in local["files"]}
            rf = {f["path"]: key(f) for f in remote["files"]}
            check(lf == rf, f"server: {name}: reports differ: "
                            f"{[(p, lf.get(p), rf.get(p)) for p in set(lf) | set(rf) if lf.get(p) != rf.get(p)][:3]}")
            check(local["summary"] == remote["summary"] and local["skipped"] == remote["skipped"],
                  f"server: {name}: summary or skipped differ")
            print(f"server: {name}: {len(rf)} files, the same report through ckptscand")
            return rc_s

        check(same("benign", root) == 0, "server: the benign repository does not pass")
        evil = make_repo(a, tmp, "server_evil")
        with open(os.path.join(evil, "chat_template.jinja"), "w") as f:
            f.write(EVIL_TEMPLATE)
        check(same("evil template", evil) == 1, "server: the evil template does not fail the scan")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def links(a, tmp, expect):
    """Folder links are followed wherever they point, each folder once; placeholders of weights
    (a Git LFS pointer, an empty pytorch_model.bin) are ERROR. Each layout was SAFE with exit 0
    before the walk followed folder links (issue: repositories fail closed)."""
    def evil_dir(path):
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "pytorch_model.bin"), "wb") as f:
            f.write(EVIL_PICKLE)

    def expect_dangerous(name, root, culprit, *extra):
        rc, report, err = scan_json(a, "--fail-on", "dangerous", *extra, root)
        files = by_rel(report, root)
        f = files.get(culprit)
        check(rc == 1, f"links: {name}: exit {rc}, want 1: {err.strip()[:300]}")
        if check(f is not None, f"links: {name}: {culprit} was not scanned: {sorted(files)}"):
            check(f["verdict"] == "DANGEROUS", f"links: {name}: {culprit} is {f['verdict']}")
            check(any(x["rule_id"] == "scan.folder_link" for x in f["findings"]),
                  f"links: {name}: {culprit} does not name the link it was reached through")
        return report

    # A checkpoint folder linked into .git (which the walk skips by name).
    root = make_repo(a, tmp, "link_into_git")
    evil_dir(os.path.join(root, ".git", "objects", "ck"))
    os.symlink(".git/objects/ck", os.path.join(root, "checkpoint-500"))
    expect_dangerous("checkpoint-500 -> .git/objects/ck", root, "checkpoint-500/pytorch_model.bin")
    # A folder link out of the scanned path (the Action's `paths:`).
    base = os.path.join(tmp, "outside_link")
    root = make_repo(a, base, "models")
    evil_dir(os.path.join(base, "vendor", "ckpt"))
    os.symlink("../vendor/ckpt", os.path.join(root, "ckpt"))
    expect_dangerous("ckpt -> ../vendor/ckpt", root, "ckpt/pytorch_model.bin")
    # A cache snapshot that is itself a link into blobs/.
    cache_root = os.path.join(tmp, "cache_snapshot_link")
    shutil.copytree(os.path.join(a.fixtures, "hf-cache"), cache_root, symlinks=True)
    repo = os.path.join(cache_root, "models--ckptscan--tiny")
    evil_dir(os.path.join(repo, "blobs", "evil-rev"))
    os.symlink("../blobs/evil-rev", os.path.join(repo, "snapshots", "e" * 40))
    expect_dangerous("snapshots/REV -> ../blobs/evil-rev", cache_root,
                     f"models--ckptscan--tiny/snapshots/{'e' * 40}/pytorch_model.bin")
    # Manifest mode: a file behind a folder link is found, and reported as unlisted.
    root = os.path.join(tmp, "manifest_link")
    os.makedirs(root)
    shutil.copyfile(os.path.join(a.fixtures, "model", "pytorch_model.bin"),
                    os.path.join(root, "pytorch_model.bin"))
    digest = hashlib.sha256(open(os.path.join(root, "pytorch_model.bin"), "rb").read())
    with open(os.path.join(root, "SHA256SUMS"), "w") as f:
        f.write(f"{digest.hexdigest()}  pytorch_model.bin\n")
    evil_dir(os.path.join(tmp, "manifest_elsewhere"))
    os.symlink("../manifest_elsewhere", os.path.join(root, "extra"))
    rc, report, err = scan_json(a, "--manifest", os.path.join(root, "SHA256SUMS"))
    f = by_rel(report, root).get("extra/pytorch_model.bin", {})
    check(rc == 1 and "manifest.unlisted" in [x["rule_id"] for x in f.get("findings", [])],
          f"links: manifest: the file behind a folder link: exit {rc}, {f}")
    # Benign: a checkpoint-N link inside the repository, and a loop: exit 0, each file once.
    root = make_repo(a, tmp, "benign_links")
    os.makedirs(os.path.join(root, "checkpoint-1"))
    shutil.copyfile(os.path.join(root, "pytorch_model.bin"),
                    os.path.join(root, "checkpoint-1", "pytorch_model.bin"))
    os.symlink("checkpoint-1", os.path.join(root, "last-checkpoint"))
    os.symlink("..", os.path.join(root, "checkpoint-1", "parent"))
    rc, report, err = scan_json(a, "--fail-on", "dangerous", root)
    files = by_rel(report, root)
    check(rc == 0, f"links: benign: exit {rc}: {err.strip()[:300]}")
    check(len(files) == len(expect["repository"]) + 1 and
          "checkpoint-1/pytorch_model.bin" in files and
          not any(r.startswith("last-checkpoint/") for r in files),
          f"links: benign: each file once under its own path: {sorted(files)}")
    skipped = {os.path.relpath(s["path"], root): s["reason"] for s in report["skipped"]}
    check("walked as" in skipped.get("last-checkpoint", "") and
          "walked as" in skipped.get("checkpoint-1/parent", ""),
          f"links: benign: the links to walked folders are not listed: {skipped}")
    # Placeholders: a checkout without LFS, and an empty weights file.
    root = make_repo(a, tmp, "lfs")
    with open(os.path.join(root, "pytorch_model.bin"), "w") as f:
        f.write("version https://git-lfs.github.com/spec/v1\n"
                f"oid sha256:{'0' * 64}\nsize 1048576\n")
    open(os.path.join(root, "model.safetensors"), "wb").close()
    rc, report, err = scan_json(a, "--fail-on", "dangerous", root)
    files = by_rel(report, root)
    for rel in ("pytorch_model.bin", "model.safetensors"):
        codes = [e["code"] for e in files.get(rel, {}).get("errors", [])]
        check(rc == 2 and codes == ["not_present"], f"links: placeholder {rel}: exit {rc}, {codes}")
    print("links: 5 layouts through folder links, 2 placeholders")


def hidden(a, tmp):
    """An attacker's answers to the fail-closed walk (each was exit 0 under --fail-on dangerous
    before): pointers git-lfs still reads as pointers, loaders' configs that reach into .git,
    and a Hydra target decided at load time. Each must not pass."""
    ptr = f"version https://git-lfs.github.com/spec/v1\noid sha256:{'0' * 64}\nsize 9\n"
    layouts = {
        "lfs_leading_newline": {"pytorch_model.bin": "\n" + ptr},
        "lfs_nbsp": {"model.safetensors": "\u00a0" + ptr},
        "lfs_git_media": {"pytorch_model.bin": "version http://git-media.io/v/2\noid sha256:00\n"},
        "lfs_padded": {"pytorch_model.bin": ptr + " " * 2000},
        "st_modules_into_git": {
            "modules.json": json.dumps([{"idx": 0, "name": "0", "path": ".git/m",
                                         "type": "sentence_transformers.models.Transformer"}]),
            ".git/m/pytorch_model.bin": EVIL_PICKLE},
        "st_modules_torch_type": {
            "modules.json": json.dumps([{"idx": 0, "name": "0", "path": "w",
                                         "type": "sentence_transformers.SentenceTransformer.torch"}]),
            "w": "plain text: only the module type loads it as torch.load would\n"},
        "adapter_base_in_git": {
            "adapter_config.json": json.dumps({"base_model_name_or_path": ".git",
                                               "peft_type": "LORA"}),
            ".git/pytorch_model.bin": EVIL_PICKLE},
        "hydra_interpolated_target": {
            "config.yaml": "t: os.system\nmodel:\n  _target_: ${t}\n  _args_: ['true']\n"},
    }
    for name, files in layouts.items():
        root = os.path.join(tmp, "hidden", name)
        for rel, data in files.items():
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data if isinstance(data, bytes) else data.encode())
        rc, report, err = scan_json(a, "--fail-on", "dangerous", root)
        check(rc in (1, 2), f"hidden: {name}: exit {rc}, want 1 or 2: "
                            f"{[(x['path'], x['verdict']) for x in report.get('files', [])]}")
    print(f"hidden: {len(layouts)} layouts, none passes")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ckptscan", required=True)
    p.add_argument("--fixtures", required=True)
    p.add_argument("--ckptscand", help="the daemon (default: ckptscand beside --ckptscan)")
    a = p.parse_args()
    a.ckptscan = os.path.abspath(a.ckptscan)
    a.fixtures = os.path.abspath(a.fixtures)
    expect = json.load(open(os.path.join(a.fixtures, "expectations.json")))
    with tempfile.TemporaryDirectory() as tmp:
        root = benign(a, tmp, expect)
        cases = malicious(a, tmp)
        selection(a, tmp)
        unknown(a, tmp)
        cache(a, tmp, expect)
        manifest(a, tmp)
        links(a, tmp, expect)
        hidden(a, tmp)
        reports(a, tmp, root)
        server(a, tmp, root)
    print(f"repository: {len(expect['repository'])} files, {len(cases)} malicious variants, "
          f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
