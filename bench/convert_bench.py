#!/usr/bin/python3
"""Wall time and peak RSS of `ckptscan convert` against `cp` and the Python way
(hf_convert_baseline.py), in one run, on the same files.

    /usr/bin/python3 bench/convert_bench.py --ckptscan build/clients/ckptscan FILE... \
        [--runs 3] [--no-sandbox] [--outdir DIR] [--json OUT.json]

Run it with /usr/bin/python3 (Debian's torch): the baseline runs under the same interpreter.
For each file and each command: one warm-up run (page cache), then --runs runs; the median
wall time, and the peak RSS over the runs. Commands:

  cp          cp IN OUT (the floor: read and write every byte once; no fsync)
  cp+fsync    dd if=IN of=OUT bs=1M conv=fsync (the floor for a durable copy: ckptscan
              convert fsyncs OUT before linking it; cp and the Python way do not)
  sha256      openssl dgst -sha256 IN (convert hashes IN first, for provenance)
  python      hf_convert_baseline.py IN OUT --dtype keep|bf16
  ckptscan    ckptscan convert IN -o OUT --dtype keep|bf16 (jailed worker, the default)
  no-sandbox  the same with --no-sandbox (only with --no-sandbox)

OUT (in --outdir) is deleted before every run and `sync` is called, outside the timing, so no
run pays for the previous run's dirty pages.

Peak RSS, two ways (both in --json):
  wait4   ru_maxrss of the direct child from wait4. Linux folds the peak of every descendant
          the child reaped into it (ckptscan reaps its worker), so this is the largest peak of
          any single process in the tree, exactly. But a forked child inherits the bench's
          own RSS as a floor (exec records the old mm's high-water mark): the value of
          `/bin/true` run the same way is printed as the floor; numbers near it mean "at most".
  sampled a thread reads /proc/PID/status (VmHWM, RssAnon, RssFile) of the child and all its
          descendants every --sample-ms (10 ms): per process, so the jailed worker is seen on
          its own, and split into anonymous memory and file-backed pages (a mapped input's
          touched pages count in RSS but are page cache, shared and reclaimable). VmHWM is a
          high-water mark, so only growth in a process's last interval before exit is missed;
          a process that lives less than one interval may not be seen at all.

Table columns: wait4_MiB as above; hwm_MiB and anon_MiB, the largest sampled VmHWM and
RssAnon of any one process in the tree; worker_MiB and wkr_anon, the same for ckptscan's
descendants alone (its jailed worker). The --json also has the root process's own numbers and
the largest sum of VmRSS over the tree in one sample.
"""
import argparse
import json
import os
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MiB = 1024.0


def proc_status(pid):
    """Name, VmHWM, VmRSS, RssAnon, RssFile (KiB) of a live process, or None."""
    try:
        with open("/proc/%d/status" % pid) as f:
            text = f.read()
    except OSError:
        return None
    fields = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key == "Name":
            fields[key] = value.strip()
        elif key in ("VmHWM", "VmRSS", "RssAnon", "RssFile"):
            fields[key] = int(value.split()[0])
    return fields if "VmHWM" in fields else None  # a zombie has no memory fields


def proc_ppid(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rpartition(")")[2].split()[1])
    except (OSError, IndexError, ValueError):
        return None


class TreeSampler(threading.Thread):
    """Per-process peaks of a process and its descendants, sampled from /proc."""

    def __init__(self, root, interval, before):
        super().__init__(daemon=True)
        self.root, self.interval = root, interval
        self.tree = {root}
        self.others = before - {root}  # processes that existed before the fork
        self.peaks = {}  # pid -> {"name", "hwm", "anon", "file"}
        self.sum_rss = 0  # largest sum of VmRSS over the tree in one sample
        self.samples = 0
        self.done = threading.Event()

    def discover(self):
        new = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
        for pid in new:
            if pid in self.tree or pid in self.others:
                continue
            (self.tree if proc_ppid(pid) in self.tree else self.others).add(pid)

    def sample(self):
        self.discover()
        total = 0
        for pid in list(self.tree):
            st = proc_status(pid)
            if st is None:
                continue
            p = self.peaks.setdefault(pid, {"name": st.get("Name", "?"), "hwm": 0, "anon": 0,
                                            "file": 0})
            p["name"] = st.get("Name", p["name"])  # after exec
            p["hwm"] = max(p["hwm"], st["VmHWM"])
            p["anon"] = max(p["anon"], st.get("RssAnon", 0))
            p["file"] = max(p["file"], st.get("RssFile", 0))
            total += st["VmRSS"]
        self.sum_rss = max(self.sum_rss, total)
        self.samples += 1

    def run(self):
        while not self.done.is_set():
            self.sample()
            self.done.wait(self.interval)

    def stop(self):
        self.done.set()
        self.join()


def run(cmd, out, interval):
    """Wall seconds, wait4 ru_maxrss (KiB), exit code and sampled peaks of one command."""
    if out and os.path.lexists(out):
        os.unlink(out)
    os.sync()
    before = {int(p) for p in os.listdir("/proc") if p.isdigit()}
    r, w = os.pipe()  # close-on-exec: EOF once the child has exec'd, so the sampler
    t0 = time.perf_counter()  # never sees the forked copy of this bench
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            os.execv(cmd[0], cmd)
        finally:
            os._exit(127)
    os.close(w)
    os.read(r, 1)
    os.close(r)
    sampler = TreeSampler(pid, interval, before)
    if interval > 0:
        sampler.start()
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    if interval > 0:
        sampler.stop()
    root = sampler.peaks.get(pid, {"hwm": 0, "anon": 0, "file": 0})
    kids = [p for q, p in sampler.peaks.items() if q != pid]
    return {
        "wall_s": wall,
        "exit": os.waitstatus_to_exitcode(status),
        "wait4_maxrss_kib": usage.ru_maxrss,
        "root_hwm_kib": root["hwm"], "root_anon_kib": root["anon"], "root_file_kib": root["file"],
        "child_hwm_kib": max([p["hwm"] for p in kids], default=0),
        "child_anon_kib": max([p["anon"] for p in kids], default=0),
        "child_file_kib": max([p["file"] for p in kids], default=0),
        "children": sorted({p["name"] for p in kids}),
        "sum_rss_kib": sampler.sum_rss,
        "samples": sampler.samples,
        "out_bytes": os.path.getsize(out) if out and os.path.exists(out) else None,
    }


def measure(cmd, out, runs, interval):
    run(cmd, out, interval)  # warm-up: page cache
    rs = [run(cmd, out, interval) for _ in range(runs)]
    if out and os.path.lexists(out):
        os.unlink(out)
    keys = [k for k in rs[0] if k.endswith("_kib")]
    agg = {"median_s": statistics.median(r["wall_s"] for r in rs),
           "min_s": min(r["wall_s"] for r in rs), "max_s": max(r["wall_s"] for r in rs),
           "exits": sorted({r["exit"] for r in rs}), "out_bytes": rs[-1]["out_bytes"],
           "children": sorted({c for r in rs for c in r["children"]}), "runs": rs}
    for k in keys:
        agg[k] = max(r[k] for r in rs)
    # Largest peak of any one process in the tree, sampled (wait4 has the exact one, over a floor).
    agg["tree_hwm_kib"] = max(agg["root_hwm_kib"], agg["child_hwm_kib"])
    agg["tree_anon_kib"] = max(agg["root_anon_kib"], agg["child_anon_kib"])
    return agg


def peak(m, floor):
    """Largest peak of one process in the tree: wait4's when it is above the floor (exact,
    reaped descendants included), else the sampled one."""
    w = m["wait4_maxrss_kib"]
    return max(m["tree_hwm_kib"], w if w > floor + 1024 else 0)


def mib(kib):
    return "%.0f" % (kib / MiB) if kib >= 10 * MiB else "%.1f" % (kib / MiB)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ckptscan", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-sandbox", action="store_true",
                    help="also time ckptscan convert --no-sandbox")
    ap.add_argument("--outdir", default="/tmp/convert_bench")
    ap.add_argument("--sample-ms", type=float, default=10.0,
                    help="/proc sampling interval; 0: no sampling (wait4 only)")
    ap.add_argument("--json")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    os.makedirs(args.outdir, exist_ok=True)
    interval = args.sample_ms / 1000.0
    ckptscan = os.path.abspath(args.ckptscan)
    baseline = os.path.join(HERE, "hf_convert_baseline.py")
    floor = run(["/bin/true"], None, interval)["wait4_maxrss_kib"]
    load0 = os.getloadavg()
    print("wait4 floor (/bin/true forked from this bench): %s MiB; sampling every %g ms; "
          "load average %.2f %.2f %.2f" % (mib(floor), args.sample_ms, *load0))
    results = {"floor_wait4_kib": floor, "sample_ms": args.sample_ms, "runs": args.runs,
               "ckptscan": ckptscan, "python": sys.executable, "loadavg_before": load0,
               "files": {}}

    head = ("%-16s %-5s %-11s %9s %15s %9s %9s %10s %10s %10s"
            % ("file", "dtype", "tool", "median_s", "min-max_s", "wait4_MiB", "hwm_MiB",
               "anon_MiB", "worker_MiB", "wkr_anon"))
    for f in args.files:
        name = os.path.basename(f)
        out = os.path.join(args.outdir, os.path.splitext(name)[0] + ".safetensors")
        cmds = [("cp", "-", ["/bin/cp", f, out]),
                ("cp+fsync", "-", ["/bin/dd", "if=" + f, "of=" + out, "bs=1M", "conv=fsync",
                                   "status=none"]),
                ("sha256", "-", ["/usr/bin/openssl", "dgst", "-sha256", f])]
        for dtype in ("keep", "bf16"):
            cmds.append(("python", dtype, [sys.executable, baseline, f, out, "--dtype", dtype]))
            cmds.append(("ckptscan", dtype, [ckptscan, "convert", f, "-o", out, "--dtype", dtype]))
            if args.no_sandbox:
                cmds.append(("no-sandbox", dtype, [ckptscan, "convert", "--no-sandbox", f, "-o",
                                                   out, "--dtype", dtype]))
        res = {"size_bytes": os.path.getsize(f)}
        print("\n%s (%.1f MB)" % (f, res["size_bytes"] / 1e6))
        print(head)
        for tool, dtype, cmd in cmds:
            m = measure(cmd, None if tool == "sha256" else out, args.runs, interval)
            res["%s/%s" % (tool, dtype)] = dict(m, cmd=cmd)
            worker = tool == "ckptscan"
            print("%-16s %-5s %-11s %9.3f %15s %9s %9s %10s %10s %10s%s" % (
                name[:16], dtype, tool, m["median_s"], "%.3f-%.3f" % (m["min_s"], m["max_s"]),
                mib(m["wait4_maxrss_kib"]), mib(m["tree_hwm_kib"]), mib(m["tree_anon_kib"]),
                mib(m["child_hwm_kib"]) if worker else "-",
                mib(m["child_anon_kib"]) if worker else "-",
                "" if m["exits"] == [0] else "  exit %s" % m["exits"]))
        cp, cpf = res["cp/-"]["median_s"], res["cp+fsync/-"]["median_s"]
        for dtype in ("keep", "bf16"):
            ck, py = res["ckptscan/" + dtype], res["python/" + dtype]
            line = ("  %s: ckptscan/cp %.2fx (target <= 2x; /cp+fsync %.2fx), python/ckptscan "
                    "%.1fx (target >= 5x), ckptscan peak RSS %s MiB (wait4 %s), of it anonymous "
                    "%s MiB (target < 64 MiB); python peak RSS %s MiB"
                    % (dtype, ck["median_s"] / cp, ck["median_s"] / cpf,
                       py["median_s"] / ck["median_s"], mib(peak(ck, floor)),
                       mib(ck["wait4_maxrss_kib"]), mib(ck["tree_anon_kib"]),
                       mib(peak(py, floor))))
            if args.no_sandbox:
                ns = res["no-sandbox/" + dtype]
                line += "; no-sandbox/cp %.2fx, python/no-sandbox %.1fx" % (
                    ns["median_s"] / cp, py["median_s"] / ns["median_s"])
            print(line)
        results["files"][f] = res
    results["loadavg_after"] = os.getloadavg()
    print("\nload average after: %.2f %.2f %.2f" % results["loadavg_after"])
    if args.json:
        with open(args.json, "w") as fp:
            json.dump(results, fp, indent=1)


if __name__ == "__main__":
    main()
