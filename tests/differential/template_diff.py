#!/usr/bin/python3
"""The chat-template reader (core/jinja, through tests/differential/template_facts) against the
real Jinja: Debian 12's jinja2 3.1.2 (/usr/bin/python3's) and Debian 13's 3.1.6 when a Debian
13 root or an unpacked python3-jinja2 .deb provides it (--jinja316, or found by itself: see
find_jinja316 below). docs/templates.md describes the reader.

Templates: the generator's (template_gen.py: benign chat templates, escape constructions,
mutations of both; a fixed --seed gives the same ones), and every template file in the
--corpus folders (*.jinja, and the chat_template of *.json files).

Each template is read by the scanner and compiled by every Jinja release as transformers
compiles it; a template that compiles is rendered by each release in both environments
(jinja_oracle.py: transformers' sandbox and a plain Environment) with a few chat contexts
under a recording hook that records every attribute and item reached and blocks whatever is
not data. Checked:

  parse      the scanner reads a template only if some release compiles it, and refuses
             one only if every release refuses it (a template the scanner does not model,
             `unsupported`, and Jinja's own RecursionError on deep nesting are left out);
  names      every name a render reached by getattr/getitem is one the scanner tracked,
             unless the scanner said it could not fold some name (then it is not SAFE);
  safe       a template the scanner calls SAFE for an environment never reached anything
             outside data when rendered in that environment, by any release;
  verdicts   every escape of the generator's escape family that reached a dunder under a
             plain Environment is DANGEROUS for it (the sandbox refuses dunders itself: there
             the `safe` check is the one that holds).

    template_diff.py --tool PATH [--seed N] [--count N] [--corpus DIR]... [--jinja316 DIR]
                     [--require-jinja316] [--show N] [--expectations FILE] [--record]

Debian 13's answers are committed (template_expect_316.json, keyed by each template's
SHA-256): where 3.1.6 is not installed they stand in for it. After changing the generator,
its seed or count, or the corpus, re-record them with 3.1.6 present:
    template_diff.py --tool build/tests/template_facts --seed 1 --count 2000 \
        --corpus tests/fixtures/templates --record

Exit 0 when every check holds, 1 otherwise. Stdlib only; Jinja runs only in child processes.
"""
import argparse
import glob
import hashlib
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import template_gen  # noqa: E402

# Chat contexts the oracle renders with: an ordinary conversation with tools and a tool call,
# and one whose special tokens are names (as a tokenizer_config.json could set them).
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city"},
        "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}}]
MESSAGES = [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather",
                                          "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "content": "22C", "name": "get_weather"},
    {"role": "assistant", "content": "It is 22C in Paris."},
    {"role": "user", "content": "Thanks"},
]
CONTEXTS = [
    {"messages": MESSAGES, "tools": TOOLS, "add_generation_prompt": True, "bos_token": "<s>",
     "eos_token": "</s>"},
    {"messages": MESSAGES[1:2], "add_generation_prompt": False, "bos_token": "__class__",
     "eos_token": "__init__", "x": "text"},
]


def find_jinja316(explicit):
    """A folder holding Debian 13's jinja2 package: --jinja316, $CKPT_JINJA316, the modern
    root of scripts/modern_root.sh, or a Debian 13 root under /var/tmp."""
    candidates = [explicit, os.environ.get("CKPT_JINJA316")]
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    candidates.append(os.path.join(cache, "ckptscan", "trixie", "usr", "lib", "python3",
                                   "dist-packages"))
    candidates += sorted(glob.glob("/var/tmp/*/usr/lib/python3/dist-packages"))
    candidates += sorted(glob.glob("/tmp/*/usr/lib/python3/dist-packages"))
    for c in candidates:
        if not c:
            continue
        init = os.path.join(c, "jinja2", "__init__.py")
        try:
            with open(init, encoding="utf-8") as f:
                if '__version__ = "3.1.6"' in f.read():
                    return c
        except OSError:
            continue
    return None


def oracle(args_path, requests, jinja_path):
    """Runs jinja_oracle.py over `requests`; returns {id: result}."""
    cmd = ["/usr/bin/python3", "-S" if False else "-B", os.path.join(HERE, "jinja_oracle.py")]
    tmp = None
    if jinja_path:
        # Only the jinja2 package goes first on sys.path, not the rest of that root.
        tmp = tempfile.mkdtemp(prefix="jinja316.")
        os.symlink(os.path.join(jinja_path, "jinja2"), os.path.join(tmp, "jinja2"))
        cmd += ["--jinja-path", tmp]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    return proc, tmp


def run_tool(tool, templates):
    payload = "".join(json.dumps({"id": i, "template": t}) + "\n"
                      for i, (_, t) in enumerate(templates))
    proc = subprocess.run([tool], input=payload, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        sys.exit("template_facts failed: %s" % proc.stderr[-2000:])
    return {r["id"]: r for r in map(json.loads, proc.stdout.splitlines())}


def corpus_templates(dirs):
    out = []
    for d in dirs:
        for path in sorted(glob.glob(os.path.join(d, "**", "*"), recursive=True)):
            if path.endswith(".jinja"):
                with open(path, encoding="utf-8", newline="") as f:
                    out.append(("corpus:" + os.path.relpath(path, d), f.read()))
            elif path.endswith(".json"):
                try:
                    with open(path, encoding="utf-8") as f:
                        doc = json.load(f)
                except (ValueError, OSError):
                    continue
                t = doc.get("chat_template") if isinstance(doc, dict) else None
                if isinstance(t, str):
                    out.append(("corpus:" + os.path.relpath(path, d), t))
                elif isinstance(t, list):
                    for entry in t:
                        if isinstance(entry, dict) and isinstance(entry.get("template"), str):
                            out.append(("corpus:%s:%s" % (os.path.relpath(path, d),
                                                          entry.get("name")), entry["template"]))
    return out


def text_key(text):
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:20]


def compact(r):
    """What the checks read of one oracle answer: the compile result, and per render the
    environment, the names reached (as a set) and the first non-data steps."""
    return {"version": r["version"], "compile": {k: v for k, v in r["compile"].items()
                                                 if k in ("ok", "error")},
            "renders": [{"env": x["env"], "names": sorted({n[2] for n in x["names"]}),
                         "nondata": x["nondata"][:3]} for x in r["renders"]]}


def write_expectations(path, templates, got):
    doc = {text_key(t): compact(got[i]) for i, (_, t) in enumerate(templates)}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, sort_keys=True, separators=(",", ":"))
        f.write("\n")
    print("recorded jinja2 3.1.6's answers for %d templates in %s" % (len(doc), path))


def read_expectations(path, templates):
    """{id: answer} from the recorded file, or None when it misses any template."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    out = {}
    for i, (_, t) in enumerate(templates):
        r = doc.get(text_key(t))
        if r is None:
            return None
        # The recorded names are a set: the checks read only the name (n[2]).
        out[i] = dict(r, renders=[dict(x, names=[["", "", n] for n in x["names"]])
                                  for x in r["renders"]])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True, help="the built template_facts")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--corpus", action="append", default=[])
    ap.add_argument("--jinja316", default=None)
    ap.add_argument("--require-jinja316", action="store_true")
    ap.add_argument("--show", type=int, default=10, help="failures printed per check")
    ap.add_argument("--expectations", default=os.path.join(HERE, "template_expect_316.json"),
                    help="jinja2 3.1.6's recorded answers, used when 3.1.6 is not installed")
    ap.add_argument("--record", action="store_true",
                    help="write 3.1.6's answers (needs 3.1.6) to --expectations")
    args = ap.parse_args()

    templates = corpus_templates(args.corpus) + template_gen.generate(args.seed, args.count)
    ours = run_tool(args.tool, templates)

    releases = [("3.1.2", None)]
    j316 = find_jinja316(args.jinja316)
    if j316:
        releases.append(("3.1.6", j316))
    elif args.require_jinja316:
        sys.exit("jinja2 3.1.6 not found (--jinja316, $CKPT_JINJA316, scripts/modern_root.sh)")
    elif args.record:
        sys.exit("--record needs jinja2 3.1.6 (--jinja316, $CKPT_JINJA316, scripts/modern_root.sh)")

    # Ask every release, in parallel: compile everything, render what compiles.
    procs = []
    for name, path in releases:
        proc, tmp = oracle(None, None, path)
        procs.append((name, proc, tmp))
    import threading

    answers = {}

    def feed(proc):
        for i, (_, t) in enumerate(templates):
            proc.stdin.write(json.dumps({"id": i, "template": t, "contexts": CONTEXTS}) + "\n")
        proc.stdin.close()

    threads = []
    for name, proc, _ in procs:
        th = threading.Thread(target=feed, args=(proc,))
        th.start()
        threads.append(th)
    for name, proc, tmp in procs:
        got = {}
        for line in proc.stdout:
            r = json.loads(line)
            got[r["id"]] = r
        proc.wait()
        if proc.returncode != 0:
            sys.exit("jinja_oracle (%s) failed: %s" % (name, proc.stderr.read()[-2000:]))
        answers[name] = got
        if tmp:
            os.unlink(os.path.join(tmp, "jinja2"))
            os.rmdir(tmp)
    for th in threads:
        th.join()
    if args.record:
        write_expectations(args.expectations, templates, answers["3.1.6"])
    elif not j316:
        recorded = read_expectations(args.expectations, templates)
        if recorded is None:
            print("note: jinja2 3.1.6 not found and %s does not cover these templates; "
                  "comparing with 3.1.2 only" % args.expectations)
        else:
            print("note: jinja2 3.1.6 not found; its recorded answers stand in for it")
            answers["3.1.6"] = recorded
            procs.append(("3.1.6", None, None))
    versions = sorted({r["version"] for got in answers.values() for r in got.values()})

    failures = {"parse": [], "names": [], "safe": [], "verdicts": []}
    counts = {"templates": len(templates), "compiled": 0, "refused": 0, "unsupported": 0,
              "limit": 0, "inconclusive": 0, "renders": 0, "nondata_renders": 0,
              "safe": {"plain": 0, "sandbox": 0}, "dangerous": {"plain": 0, "sandbox": 0}}
    for i, (family, text) in enumerate(templates):
        mine = ours[i]
        theirs = [answers[name][i] for name, _, _ in procs]
        compiled = [r["compile"]["ok"] for r in theirs]
        inconclusive = any(r["compile"].get("error") in ("RecursionError", "MemoryError")
                           for r in theirs)
        if "limit" in mine:
            counts["limit"] += 1
            continue
        parse = mine["parse"]
        if parse.get("unsupported"):
            counts["unsupported"] += 1
            continue
        if any(compiled):
            counts["compiled"] += 1
        else:
            counts["refused"] += 1
        if inconclusive:
            counts["inconclusive"] += 1
        elif parse["ok"] and not any(compiled):
            failures["parse"].append((i, family, text, "read here, refused by every release: %s"
                                      % "; ".join(r["compile"].get("message", "")
                                                  for r in theirs)))
        elif not parse["ok"] and any(compiled):
            failures["parse"].append((i, family, text, "refused here (%s at %s), compiled by %s"
                                      % (parse.get("message"), parse.get("offset"),
                                         ", ".join(r["version"] for r in theirs
                                                   if r["compile"]["ok"]))))
        if not parse["ok"] or "envs" not in mine:
            continue
        tracked = set(mine.get("names", []))
        for env in ("plain", "sandbox"):
            verdict = mine["envs"][env]
            if verdict == "SAFE":
                counts["safe"][env] += 1
            if verdict == "DANGEROUS":
                counts["dangerous"][env] += 1
        for r in theirs:
            for rend in r["renders"]:
                counts["renders"] += 1
                env = rend["env"]
                if rend["nondata"]:
                    counts["nondata_renders"] += 1
                    if mine["envs"][env] == "SAFE":
                        failures["safe"].append((i, family, text, "SAFE for %s, but %s reached %s"
                                                 % (env, r["version"], rend["nondata"][:3])))
                    # The sandbox refuses dunders itself: there, not SAFE is enough.
                    elif (family == "escape" and env == "plain"
                          and mine["envs"][env] != "DANGEROUS"
                          and any(n[2].startswith("__") for n in rend["nondata"])):
                        failures["verdicts"].append((i, family, text, "%s for %s, but %s reached %s"
                                                     % (mine["envs"][env], env, r["version"],
                                                        rend["nondata"][:3])))
                if not mine.get("unresolved"):
                    missing = sorted({n[2] for n in rend["names"]} - tracked)
                    if missing:
                        failures["names"].append((i, family, text, "%s (%s) reached %s, not tracked"
                                                  % (r["version"], env, missing[:5])))

    total = 0
    for check, items in failures.items():
        total += len(items)
        for i, family, text, why in items[:args.show]:
            print("FAIL %s #%d (%s): %s\n    %r" % (check, i, family, why, text[:400]))
    print("template differential (seed %d, jinja2 %s): %s; failures: %s" % (
        args.seed, " and ".join(versions), json.dumps(counts, sort_keys=True),
        json.dumps({k: len(v) for k, v in failures.items()})))
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
