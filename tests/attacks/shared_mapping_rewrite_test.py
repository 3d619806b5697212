#!/usr/bin/python3
"""A file rewritten through a shared writable mapping while it is scanned .

Writes through a MAP_SHARED, PROT_WRITE mapping to pages that are already dirty move neither
mtime nor ctime, so the scanner's stat comparison cannot see them. An attacker who owns a file
the scanner reads maps it, dirties the last page (writing the benign bytes again), and once the
scan has started rewrites the tail into a malicious pickle of the same size. Before the fix the
jailed worker parsed the benign bytes and the trusted side hashed the malicious ones: SAFE with
the digest of a malicious file, and a signed conversion whose provenance names it.

Each round creates a benign file of the same size as a malicious one that differs only in its
tail (scan: a pickle whose big BINBYTES is followed by a string or by posix.system('id');
convert: a torch zip whose data.pkl, stored last, gains that call), runs `ckptscan scan` or
`ckptscan convert` on it, and rewrites the tail DELAY ms after starting it:
  copy   the attacker's mapping exists (and is dirty) before the scan: no read lease can be
         taken, so the scanner must work from a sealed private copy. The test checks that the
         rewrite itself moved neither mtime nor ctime (else the round proves nothing and is
         retried).
  lease  the attacker opens the file for writing only after the scan started, then rewrites it
         through a new mapping: the scanner holds a read lease, so the open waits or breaks it.
Every result must be either not SAFE, or SAFE with the digest of the benign bytes (the bytes
parsed); a conversion's signed provenance (`ckptscan.source_sha256`) likewise. SAFE with the
malicious digest is the failure. With --ckptscand the same rounds run against a daemon by path
(ScanPath, ConvertPath; the file beneath its --root) at --daemon-delays-ms.

    shared_mapping_rewrite_test.py --ckptscan build/clients/ckptscan
        [--ckptscand build/clients/ckptscand] [--mib 32] [--delays-ms 0,1,5,20,50,100]
        [--daemon-delays-ms 20,50,100] [--skip-exit 77]
"""
import argparse
import hashlib
import json
import mmap
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zipfile

CALL = b"cposix\nsystem\nX\x02\x00\x00\x00id\x85R"  # posix.system('id'), one value left


def same_size_string(n):
    """A pickle string op of exactly `n` bytes (n >= 5)."""
    return b"X" + struct.pack("<I", n - 5) + b"a" * (n - 5)


def scan_pair(payload):
    """(benign, malicious) pickles of the same size that differ only after a BINBYTES of
    `payload` zeros."""
    head = b"\x80\x03B" + struct.pack("<I", payload) + bytes(payload) + b"0"
    return head + same_size_string(len(CALL)) + b".", head + CALL + b"."


def torch_pair(numel):
    """(benign, malicious) torch zips (stored; data/0 of `numel` float32 first, data.pkl last)
    of the same size that differ only in data.pkl (and its CRC)."""
    def text(s):
        b = s.encode()
        return b"X" + struct.pack("<I", len(b)) + b

    def int4(n):
        return b"J" + struct.pack("<i", n)

    body = b"ccollections\nOrderedDict\n)R(" + text("weight")
    body += b"ctorch._utils\n_rebuild_tensor_v2\n((" + text("storage")
    body += b"ctorch\nFloatStorage\n" + text("0") + text("cpu") + int4(numel) + b"tQ"
    body += b"K\x00" + int4(numel) + b"\x85K\x01\x85\x89ccollections\nOrderedDict\n)RtRu."
    pickles = (b"\x80\x02" + same_size_string(len(CALL)) + b"0" + body,
               b"\x80\x02" + CALL + b"0" + body)
    out = []
    for p in pickles:
        path = tempfile.mktemp(suffix=".pt")
        with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
            stamp = (2024, 1, 1, 0, 0, 0)
            z.writestr(zipfile.ZipInfo("m/data/0", stamp), bytes(4 * numel))
            z.writestr(zipfile.ZipInfo("m/data.pkl", stamp), p)
            z.writestr(zipfile.ZipInfo("m/version", stamp), b"3\n")
        with open(path, "rb") as f:
            out.append(f.read())
        os.unlink(path)
    assert len(out[0]) == len(out[1])
    return out[0], out[1]


def differing_tail(a, b):
    """The offset from which a and b differ (they are equal before it)."""
    i = 0
    while a[i] == b[i]:
        i += 1
    return i


class Round:
    """One scan or conversion of `benign` (written to DIR/in) rewritten to `malicious` at
    `delay` seconds, as `how` says. Returns (verdict, sha256, converted, times_moved)."""

    def __init__(self, cli, directory, mode, how, benign, malicious, delay, server=None):
        self.cli, self.mode, self.how, self.delay, self.server = cli, mode, how, delay, server
        self.benign, self.malicious = benign, malicious
        self.path = os.path.join(directory, "in.pt" if mode == "convert" else "in.pkl")
        self.out = os.path.join(directory, "out.safetensors")
        self.tail = differing_tail(benign, malicious)

    def command(self):
        # With a daemon: by path (ScanPath, ConvertPath), the file beneath its root.
        via = ["--server", "unix:" + self.server, "--by-path"] if self.server else []
        if self.mode == "scan":
            return [self.cli, "scan", "--format", "json", "--digest", "sha256", *via,
                    self.path]
        return [self.cli, "convert", "--format", "json", "--force", *via, "-o", self.out,
                self.path]

    def run(self):
        for p in (self.path, self.out):
            if os.path.exists(p):
                os.unlink(p)
        with open(self.path, "wb") as f:
            f.write(self.benign)
            os.fsync(f.fileno())  # clean pages: only the attacker's own write dirties them
        if self.how == "copy":
            return self.run_copy()
        return self.run_lease()

    def run_copy(self):
        fd = os.open(self.path, os.O_RDWR)
        m = mmap.mmap(fd, len(self.benign), mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        os.close(fd)  # the mapping keeps the file open for writing
        try:
            # Dirty the pages of the tail: the fault updates the times now, before the scan.
            m[self.tail:] = self.benign[self.tail:]
            time.sleep(0.02)
            before = os.stat(self.path)
            proc = subprocess.Popen(self.command(), stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
            time.sleep(self.delay)
            m[self.tail:] = self.malicious[self.tail:]  # no fault: the pages are dirty
            after = os.stat(self.path)
            stdout, stderr = proc.communicate(timeout=120)
        finally:
            m.close()
        moved = (before.st_mtime_ns, before.st_ctime_ns) != (after.st_mtime_ns, after.st_ctime_ns)
        return self.result(stdout, stderr, proc.returncode, moved)

    def run_lease(self):
        opened = {}

        def writer():
            time.sleep(self.delay)
            fd = os.open(self.path, os.O_RDWR)  # waits while the scanner holds a lease
            opened["at"] = time.monotonic()
            m = mmap.mmap(fd, len(self.benign), mmap.MAP_SHARED,
                          mmap.PROT_READ | mmap.PROT_WRITE)
            m[self.tail:] = self.malicious[self.tail:]
            m.close()
            os.close(fd)

        proc = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        t = threading.Thread(target=writer)
        t.start()
        stdout, stderr = proc.communicate(timeout=120)
        t.join()
        return self.result(stdout, stderr, proc.returncode, False)

    def result(self, stdout, stderr, code, moved):
        try:
            report = json.loads(stdout)
        except ValueError:
            raise AssertionError("no JSON report (exit %d): %s" % (code, stderr.strip()[:400]))
        f = report["files"][0]
        converted = self.mode == "convert" and "conversion" in f and os.path.exists(self.out)
        sha = f.get("sha256", "")
        if converted:
            # The signed output's provenance names the source by this digest.
            with open(self.out, "rb") as out:
                n = struct.unpack("<Q", out.read(8))[0]
                meta = json.loads(out.read(n)).get("__metadata__", {})
            sha = meta.get("ckptscan.source_sha256", "")
        errors = [e.get("message", "") for e in f.get("errors", [])]
        return f["verdict"], sha, converted, moved, errors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckptscan", required=True)
    ap.add_argument("--mib", type=int, default=32, help="size of the benign payload")
    ap.add_argument("--delays-ms", default="0,1,5,20,50,100")
    ap.add_argument("--modes", default="scan,convert")
    ap.add_argument("--ways", default="copy,lease")
    ap.add_argument("--ckptscand", help="also attack this daemon's ScanPath and ConvertPath")
    ap.add_argument("--daemon-delays-ms", default="20,50,100")
    ap.add_argument("--skip-exit", type=int, default=77)
    args = ap.parse_args()
    if not hasattr(mmap, "MAP_SHARED"):
        print("SKIP: this Python has no mmap.MAP_SHARED")
        return args.skip_exit

    delays = [int(d) / 1000.0 for d in args.delays_ms.split(",")]
    pairs = {"scan": scan_pair(args.mib << 20), "convert": torch_pair((args.mib << 20) // 4)}
    directory = tempfile.mkdtemp(prefix="shared_mapping_rewrite_")
    failures = []
    daemon = None
    targets = [("cli", directory, None, delays)]
    try:
        if args.ckptscand:
            # The root apart from the daemon's socket and state (ckptscand insists).
            root = os.path.join(directory, "root")
            own = os.path.join(directory, "daemon")
            os.mkdir(root)
            os.mkdir(own)
            sock = os.path.join(own, "d.sock")
            log = open(os.path.join(directory, "daemon.log"), "wb")
            daemon = subprocess.Popen([args.ckptscand, "--socket", sock, "--state-dir",
                                       os.path.join(own, "state"), "--root", root],
                                      stdout=log, stderr=log)
            for _ in range(200):
                if os.path.exists(sock) or daemon.poll() is not None:
                    break
                time.sleep(0.05)
            if not os.path.exists(sock):
                with open(os.path.join(directory, "daemon.log"), "rb") as f:
                    raise AssertionError("ckptscand did not start: %r" % f.read()[-600:])
            targets.append(("daemon", root, sock,
                            [int(d) / 1000.0 for d in args.daemon_delays_ms.split(",")]))
        for (target, where, server, target_delays), mode, how in (
                (t, m, h) for t in targets for m in args.modes.split(",")
                for h in args.ways.split(",")):
            benign, malicious = pairs[mode]
            good = hashlib.sha256(benign).hexdigest()
            bad = hashlib.sha256(malicious).hexdigest()
            for delay in target_delays:
                r = Round(args.ckptscan, where, mode, how, benign, malicious, delay, server)
                for _ in range(3):
                    verdict, sha, converted, moved, errors = r.run()
                    if not moved:
                        break
                name = "%s %s/%s at %d ms" % (target, mode, how, delay * 1000)
                digest = {good: "benign", bad: "MALICIOUS"}.get(sha, sha or "none")
                line = "%-33s %-10s digest %-9s%s%s" % (
                    name, verdict, digest, " converted" if converted else "",
                    (" errors: " + "; ".join(errors)[:150]) if errors else "")
                print(line)
                if moved:
                    failures.append("%s: the rewrite moved mtime/ctime three times: the "
                                    "attack was not reproduced" % name)
                if verdict == "SAFE" and sha == bad:
                    failures.append("%s: SAFE with the digest of the malicious bytes" % name)
                elif verdict == "SAFE" and sha != good:
                    failures.append("%s: SAFE with a digest (%s) that is not of the bytes "
                                    "parsed" % (name, sha))
                if converted and (verdict != "SAFE" or sha != good):
                    failures.append("%s: converted with verdict %s and a %s digest"
                                    % (name, verdict, digest))
                sys.stdout.flush()
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait(timeout=60)
        shutil.rmtree(directory, ignore_errors=True)
    for f in failures:
        print("FAIL " + f)
    print("%d failure(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
