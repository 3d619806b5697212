#!/usr/bin/env bash
# End-to-end checks of `ckptscan scan` over a model repository as a whole: safetensors
# validated in the worker, sharded indexes and their shards, --fail-on, --exclude, --manifest,
# --format junit.
#   clients/repo_scan_test.sh path/to/ckptscan path/to/tests/fixtures
# Each case names the scenario it proves; the script fails if any case fails.
set -uo pipefail

bin="${1:?usage: repo_scan_test.sh path/to/ckptscan path/to/tests/fixtures}"
fixtures="${2:?usage: repo_scan_test.sh path/to/ckptscan path/to/tests/fixtures}"
bin="$(realpath "$bin")"
fixtures="$(realpath "$fixtures")"
py=/usr/bin/python3
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/test_lib.sh"
enter_tmp

# safetensors files, written with the stdlib: a valid one, and malformed ones.
"$py" - <<'PY'
import json, struct
def st(path, header, data=b"", raw_len=None):
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    n = len(h) if raw_len is None else raw_len
    open(path, "wb").write(struct.pack("<Q", n) + h + data)
st("model.safetensors", {"__metadata__": {"format": "pt"},
                         "w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8)
# data_offsets past the buffer: the reference loader refuses it.
st("overflow.safetensors", {"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 16]}}, b"\0" * 8)
# header length past the end of the file.
st("truncated.safetensors", {"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"", raw_len=4096)
# the same key twice (strict profile).
body = b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
body += b" " * (-len(body) % 8)
open("duplicate.safetensors", "wb").write(struct.pack("<Q", len(body)) + body + b"\0" * 4)
PY
printf '\x80\x02}q\x00.' >safe.pkl                      # {} (protocol 2)
printf "cposix\nsystem\n(S'id'\ntR." >evil.pkl           # posix.system('id')
printf "cmymodule\nMyClass\n)R." >odd.pkl              # SUSPICIOUS: not allowed, not denied
printf '\x80\x02}q\x00' >truncated.pkl                  # no STOP

name=ValidSafetensorsIsSafeWithItsTensorCount
if run "$name" 0 "$bin" scan --format json model.safetensors; then
  "$py" -c '
import json
f = json.load(open("out.txt"))["files"][0]
assert f["format"] == "safetensors" and f["verdict"] == "SAFE", f
assert f["tensors"]["count"] == 1 and f["tensors"]["bytes"] == 8, f
assert f["errors"] == [] and f["findings"] == [], f
' && pass "$name" || fail "$name" "$(cat out.txt)"
fi

name=ValidSafetensorsIsSafeWithoutTheSandboxToo
if run "$name" 0 "$bin" scan --no-sandbox model.safetensors; then
  contains out.txt "model.safetensors: SAFE (safetensors" && pass "$name" || fail "$name" "$(cat out.txt)"
fi

name=MalformedSafetensorsIsErrorWithTheValidatorsMessage
ok=1
for f in overflow truncated duplicate; do
  if run "$name" 2 "$bin" scan --format json "$f.safetensors"; then
    "$py" -c '
import json, sys
f = json.load(open("out.txt"))["files"][0]
assert f["format"] == "safetensors" and f["verdict"] == "ERROR", f
e = f["errors"][0]
assert e["code"] == "malformed" and e["message"].startswith("safetensors: ") and "byte offset" in e["message"], e
' || { fail "$name" "$f: $(cat out.txt)"; ok=0; }
  else ok=0; fi
done
[[ $ok -eq 1 ]] && pass "$name"

name=SafetensorsErrorIsTheSameJailedAndInProcess
"$bin" scan --format json overflow.safetensors >jailed.json 2>/dev/null
"$bin" scan --no-sandbox --format json overflow.safetensors >inproc.json 2>/dev/null
cmp -s jailed.json inproc.json && pass "$name" || fail "$name" "$(diff jailed.json inproc.json | head)"

# A safetensors input is re-encoded (our header order and padding, provenance), never with a
# tensor fewer: names, dtypes, shapes and bytes are the input's, or the input cast to bf16.
"$py" - <<'PY'
import json, struct
import numpy as np
rng = np.random.default_rng(7)
tensors = [("b.weight", rng.standard_normal((3, 4)).astype(np.float32), "F32"),
           ("a.bias", rng.standard_normal(4).astype(np.float16), "F16"),
           ("c.index", np.arange(5, dtype=np.int64), "I64"),
           ("d.scalar", np.array(2.5), "F64"), ("e.mask", np.array([True, False]), "BOOL")]
header, data = {"__metadata__": {"format": "pt", "note": "kept out"}}, b""
for name, arr, dtype in tensors:
    header[name] = {"dtype": dtype, "shape": list(arr.shape),
                    "data_offsets": [len(data), len(data) + arr.nbytes]}
    data += arr.tobytes()
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
open("several.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + data)
PY
check_reencoded() {  # check_reencoded OUT keep|bf16
  "$py" - "$1" "$2" <<'PY'
import json, struct, sys
import numpy as np
def read(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    meta = h.pop("__metadata__", {})
    return meta, {k: (v["dtype"], v["shape"], b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
                  for k, v in h.items()}
def bf16(raw, dtype):  # round to nearest even, as torch's .to(torch.bfloat16)
    x = np.frombuffer(raw, np.float16 if dtype == "F16" else np.float32).astype(np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16).tobytes()
_, src = read("several.safetensors")
meta, out = read(sys.argv[1])
assert meta["ckptscan.source_format"] == "safetensors" and "note" not in meta, meta
assert sorted(out) == sorted(src), (sorted(out), sorted(src))
for k, (dtype, shape, raw) in src.items():
    if sys.argv[2] == "bf16" and dtype in ("F32", "F16"):
        assert out[k] == ("BF16", shape, bf16(raw, dtype)), k
    else:
        assert out[k] == (dtype, shape, raw), k
PY
}
for mode in keep bf16; do
  name="ConvertOfASafetensorsFileReencodesEveryTensor ($mode)"
  if run "$name" 0 "$bin" convert --dtype "$mode" several.safetensors -o "re-$mode.safetensors"; then
    check_reencoded "re-$mode.safetensors" "$mode" >chk.txt 2>&1 && pass "$name" \
      || fail "$name" "$(cat chk.txt)"
  fi
done

name=ConvertWithAWrongSelectListsTheKeysThatExist
if run "$name" 2 "$bin" convert "$fixtures/torch/train_checkpoint.pt" --select modle -o sel.safetensors; then
  [[ ! -e sel.safetensors ]] && contains err.txt "no tensor under --select modle; keys at the top level: model (9 tensors), optimizer (18 tensors)" \
    && pass "$name" || fail "$name" "$(cat err.txt)"
fi

name=ConvertOfAnInputWithoutTensorsWritesNothingAndSaysWhy
if run "$name" 2 "$bin" convert safe.pkl -o empty.safetensors; then
  [[ ! -e empty.safetensors ]] && contains err.txt "nothing to convert: the input holds no tensor" \
    && pass "$name" || fail "$name" "$(cat err.txt)"
fi

# A model repository: a sharded checkpoint, safetensors, docs, a payload hidden in a subfolder.
mkdir -p repo/docs repo/sub
cp "$fixtures"/torch/sharded/* repo/
cp model.safetensors repo/
printf '# model card\n' >repo/README.md
cp evil.pkl repo/sub/optimizer.pt
cp evil.pkl repo/docs/example.pkl

name=RepositoryScanCoversEveryFileAndEndsWithASummaryLine
if run "$name" 1 "$bin" scan repo; then
  last="$(tail -n 1 out.txt)"
  if contains out.txt "repo/model.safetensors: SAFE (safetensors" &&
     contains out.txt "repo/pytorch_model.bin.index.json: SAFE (hf-index" &&
     contains out.txt "repo/pytorch_model-00001-of-00002.bin: SAFE (torch-zip" &&
     contains out.txt "repo/sub/optimizer.pt: DANGEROUS" &&
     contains out.txt "repo/README.md: SAFE (text" &&
     contains out.txt "7 files: 5 SAFE, 0 SUSPICIOUS, 2 DANGEROUS, 0 ERROR; verdict DANGEROUS" &&
     [[ "$last" == "kinds: 1 data, 6 model; 0 skipped" ]]; then
    pass "$name"
  else
    fail "$name" "$(cat out.txt)"
  fi
fi

name=ExcludedFilesAreListedAsSkippedAndNotScanned
if run "$name" 1 "$bin" scan --exclude '*.md' --exclude docs repo; then
  if contains out.txt "skipped: repo/README.md (excluded by --exclude *.md)" &&
     contains out.txt "skipped: repo/docs (excluded by --exclude docs)" &&
     ! contains out.txt "repo/docs/example.pkl:" &&
     contains out.txt "5 files: 4 SAFE, 0 SUSPICIOUS, 1 DANGEROUS, 0 ERROR; verdict DANGEROUS" &&
     [[ "$(tail -n 1 out.txt)" == "kinds: 5 model; 2 skipped" ]]; then
    pass "$name"
  else
    fail "$name" "$(cat out.txt)"
  fi
fi

name=ExcludedFilesGoToStderrWithJsonSoTheReportParses
if run "$name" 1 "$bin" scan --format json --exclude '*.md' repo; then
  "$py" -m json.tool out.txt >/dev/null && contains err.txt "skipped: repo/README.md" \
    && pass "$name" || fail "$name" "$(cat err.txt)"
fi

name=CleanRepositoryExitsZero
if run "$name" 0 "$bin" scan --exclude '*.md' --exclude docs --exclude 'sub/*' repo; then
  contains out.txt "4 files: 4 SAFE, 0 SUSPICIOUS, 0 DANGEROUS, 0 ERROR; verdict SAFE" \
    && pass "$name" || fail "$name" "$(cat out.txt)"
fi

name=IndexListsItsShardsInTheReport
if run "$name" 0 "$bin" scan --format json repo/pytorch_model.bin.index.json; then
  "$py" -c '
import json
r = json.load(open("out.txt"))
assert r["files"][0]["shards"] == ["pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin"], r["files"][0]
# An index named alone brings its shards: the set is scanned as a whole.
assert [f["path"] for f in r["files"]] == ["repo/pytorch_model.bin.index.json",
  "repo/pytorch_model-00001-of-00002.bin", "repo/pytorch_model-00002-of-00002.bin"], r["files"]
assert all(f["verdict"] == "SAFE" for f in r["files"])
' && pass "$name" || fail "$name" "$(cat out.txt)"
fi

name=ExcludedShardIsScannedAnywayBecauseTheIndexNamesIt
if run "$name" 0 "$bin" scan --format json --exclude '*.md' --exclude docs --exclude sub \
     --exclude 'pytorch_model-00002*' repo; then
  "$py" -c '
import json
r = json.load(open("out.txt"))
assert "repo/pytorch_model-00002-of-00002.bin" in [f["path"] for f in r["files"]], r["files"]
' && pass "$name" || fail "$name" "$(cat out.txt)"
fi

name=MissingShardMakesTheIndexErrorNamingTheShard
mkdir -p broken && cp "$fixtures"/torch/sharded/pytorch_model.bin.index.json "$fixtures"/torch/sharded/pytorch_model-00001-of-00002.bin broken/
if run "$name" 2 "$bin" scan --format json broken; then
  "$py" -c '
import json
r = json.load(open("out.txt"))
idx = [f for f in r["files"] if f["path"] == "broken/pytorch_model.bin.index.json"][0]
assert idx["verdict"] == "ERROR", idx
e = idx["errors"][0]
assert e["code"] == "missing_shard" and "pytorch_model-00002-of-00002.bin" in e["message"] and "missing" in e["message"], e
' && pass "$name" || fail "$name" "$(cat out.txt)"
fi

name=IndexWhoseShardsOtherLoadersReadDifferentlyIsNeverSafe
# Each shard is a file torch's reader and numpy's zipfile read differently (fixtures/readings):
# the index is data, but the set it names is judged by its worst shard.
mkdir -p poly
cp "$fixtures"/torch/sharded/pytorch_model.bin.index.json poly/
cp "$fixtures"/readings/malicious/npz_two_zip64_directories.npz poly/pytorch_model-00001-of-00002.bin
cp "$fixtures"/readings/malicious/array_bytes_are_opcodes.joblib poly/pytorch_model-00002-of-00002.bin
if run "$name" 1 "$bin" scan --format json poly/pytorch_model.bin.index.json; then
  "$py" -c '
import json
r = json.load(open("out.txt"))
assert r["verdict"] == "DANGEROUS", r["verdict"]
shards = {f["path"]: f["verdict"] for f in r["files"]}
assert shards["poly/pytorch_model-00001-of-00002.bin"] == "DANGEROUS", shards
assert shards["poly/pytorch_model-00002-of-00002.bin"] == "DANGEROUS", shards
' && pass "$name" || fail "$name" "$(cat out.txt)"
fi

name=FailOnDangerousLetsSuspiciousPass
mkdir -p sus && cp odd.pkl safe.pkl sus/
if run "$name" 1 "$bin" scan sus; then
  contains out.txt "SUSPICIOUS" || fail "$name" "odd.pkl is not SUSPICIOUS: $(cat out.txt)"
  if run "$name" 0 "$bin" scan --fail-on dangerous sus; then
    contains out.txt "verdict SUSPICIOUS" && pass "$name" || fail "$name" "$(cat out.txt)"
  fi
fi

name=FailOnDangerousStillFailsOnDangerous
run "$name" 1 "$bin" scan --fail-on dangerous odd.pkl evil.pkl && pass "$name"

name=FailOnDangerousErrorStillExitsTwo
run "$name" 2 "$bin" scan --fail-on dangerous odd.pkl truncated.pkl && pass "$name"

name=FailOnSuspiciousSuspiciousBesideErrorExitsOne
run "$name" 1 "$bin" scan --fail-on suspicious odd.pkl truncated.pkl && pass "$name"

name=BadFailOnIsUsageError64
run "$name" 64 "$bin" scan --fail-on never safe.pkl && pass "$name"

# --manifest
mkdir -p m/sub && cp safe.pkl m/a.pkl && cp model.safetensors m/sub/b.safetensors
(cd m && sha256sum a.pkl sub/b.safetensors >SHA256SUMS)

name=ManifestAllMatchingExitsZeroAndReportsTheExpectedDigest
if run "$name" 0 "$bin" scan --format json --manifest m/SHA256SUMS; then
  "$py" -c '
import json
r = json.load(open("out.txt"))
assert [f["path"] for f in r["files"]] == ["m/a.pkl", "m/sub/b.safetensors"], r["files"]
for f in r["files"]:
    assert f["verdict"] == "SAFE" and f["expected_sha256"] == f["sha256"], f
' && pass "$name" || fail "$name" "$(cat out.txt)"
fi

name=ManifestDigestMismatchIsItsOwnErrorAndNeverExitsZero
printf '\x80\x02]q\x00.' >m/a.pkl                       # still SAFE, but not the listed bytes
if run "$name" 2 "$bin" scan --format json --manifest m/SHA256SUMS; then
  "$py" -c '
import json
f = json.load(open("out.txt"))["files"][0]
assert f["verdict"] == "ERROR" and f["expected_sha256"] != f["sha256"], f
e = f["errors"][0]
assert e["code"] == "digest_mismatch" and f["sha256"] in e["message"] and f["expected_sha256"] in e["message"], e
' && pass "$name" || fail "$name" "$(cat out.txt)"
fi

name=ManifestDigestMismatchIsShownInText
if run "$name" 2 "$bin" scan --manifest m/SHA256SUMS; then
  contains out.txt "m/a.pkl: ERROR" && contains out.txt "error digest_mismatch" \
    && pass "$name" || fail "$name" "$(cat out.txt)"
fi

name=ManifestDigestMismatchFailsEvenWithFailOnDangerous
run "$name" 2 "$bin" scan --fail-on dangerous --manifest m/SHA256SUMS && pass "$name"

name=ManifestMissingFileIsError
cp safe.pkl m/a.pkl
printf '%s  gone.bin\n' "$(sha256sum safe.pkl | cut -d' ' -f1)" >>m/SHA256SUMS
if run "$name" 2 "$bin" scan --format json --manifest m/SHA256SUMS; then
  "$py" -c '
import json
r = json.load(open("out.txt"))
f = r["files"][-1]
assert f["path"] == "m/gone.bin" and f["verdict"] == "ERROR" and f["errors"][0]["code"] == "io", f
assert "missing" in f["errors"][0]["message"], f
assert [x["verdict"] for x in r["files"][:2]] == ["SAFE", "SAFE"], r
' && pass "$name" || fail "$name" "$(cat out.txt)"
fi

name=JsonManifestIsReadRelativeToItsFolder
"$py" -c '
import hashlib, json
d = lambda p: hashlib.sha256(open(p, "rb").read()).hexdigest()
json.dump([{"path": "a.pkl", "sha256": d("m/a.pkl")}, {"path": "sub/b.safetensors", "sha256": d("m/sub/b.safetensors").upper()}], open("m/manifest.json", "w"))
'
# The folder also holds SHA256SUMS, which this manifest does not list: scanned, and
# SUSPICIOUS as manifest.unlisted (its digest is not pinned).
if run "$name" 1 "$bin" scan --manifest m/manifest.json; then
  contains out.txt "m/sub/b.safetensors: SAFE" && contains out.txt "m/a.pkl: SAFE" &&
    contains out.txt "m/SHA256SUMS: SUSPICIOUS (text" && contains out.txt "manifest.unlisted" &&
    contains out.txt "skipped: m/manifest.json (the manifest itself)" \
    && pass "$name" || fail "$name" "$(cat out.txt)"
fi

name=BrokenManifestIsUsageError64NamingTheLine
printf 'abc  a.pkl\n' >m/bad.sums
if run "$name" 64 "$bin" scan --manifest m/bad.sums; then
  contains err.txt "m/bad.sums:1" && pass "$name" || fail "$name" "$(cat err.txt)"
fi

name=ManifestWithDigestNoneIsUsageError64
run "$name" 64 "$bin" scan --digest none --manifest m/SHA256SUMS && pass "$name"

name=ScanWithoutPathOrManifestIsUsageError64
run "$name" 64 "$bin" scan --format json && pass "$name"

# --format junit
printf "cposix\nsystem\n(S'<&\"\x1b]0;x\x07 \xff'\ntR." >'we<ird&"name.pkl'

name=JunitHasATestcasePerFileFailureForFindingsErrorForErrors
if run "$name" 1 "$bin" scan --format junit safe.pkl evil.pkl odd.pkl truncated.pkl 'we<ird&"name.pkl'; then
  "$py" -c '
import xml.etree.ElementTree as ET
root = ET.parse("out.txt").getroot()
assert root.tag == "testsuites" and root.get("tests") == "5", root.attrib
assert root.get("failures") == "3" and root.get("errors") == "1", root.attrib
cases = {c.get("name"): c for c in root.iter("testcase")}
assert list(cases) == ["safe.pkl", "evil.pkl", "odd.pkl", "truncated.pkl", "we<ird&\"name.pkl"], list(cases)
assert len(list(cases["safe.pkl"])) == 0
f = cases["evil.pkl"].find("failure")
assert f is not None and f.get("type") == "DANGEROUS" and "posix.system" in f.text, f
assert cases["odd.pkl"].find("failure").get("type") == "SUSPICIOUS"
e = cases["truncated.pkl"].find("error")
assert e is not None and e.get("type") == "ERROR" and "malformed" in e.text, e
w = cases["we<ird&\"name.pkl"].find("failure").text
assert "\x1b" not in w and "\\x1b" in w and "<&" in w, w
' && pass "$name" || fail "$name" "$(head -c 3000 out.txt)"
fi

name=JunitWithFailOnDangerousKeepsSuspiciousAsPassingWithOutput
if run "$name" 0 "$bin" scan --format junit --fail-on dangerous odd.pkl safe.pkl; then
  "$py" -c '
import xml.etree.ElementTree as ET
root = ET.parse("out.txt").getroot()
assert root.get("failures") == "0" and root.get("errors") == "0", root.attrib
c = [c for c in root.iter("testcase") if c.get("name") == "odd.pkl"][0]
assert c.find("failure") is None and "SUSPICIOUS" in c.find("system-out").text
' && pass "$name" || fail "$name" "$(cat out.txt)"
fi

name=JunitOfARepositoryParses
if run "$name" 1 "$bin" scan --format junit repo; then
  "$py" -c '
import xml.etree.ElementTree as ET
root = ET.parse("out.txt").getroot()
assert root.get("tests") == "7", root.attrib
' && pass "$name" || fail "$name" "$(cat out.txt)"
fi

# Every digest is compared, also for a second name of a file already scanned: a manifest entry
# turned into a link to another listed file, the same path listed with two digests, and a
# Hugging Face cache blob hard-linked to another blob (found by an adversary: each was SAFE).
mkdir -p twice && cp safe.pkl twice/a.pkl && printf '\x80\x02]q\x00.' >twice/b.pkl
(cd twice && sha256sum a.pkl b.pkl >SHA256SUMS && rm b.pkl && ln -s a.pkl b.pkl)
name=ManifestEntryThatBecameALinkToAnotherIsAMismatch
if run "$name" 2 "$bin" scan --manifest twice/SHA256SUMS; then
  contains out.txt "b.pkl, another name of this file" && pass "$name" || fail "$name" "$(cat out.txt)"
fi
(cd twice && rm b.pkl SHA256SUMS && { sha256sum a.pkl; printf '%064d  a.pkl\n' 0; } >SHA256SUMS)
name=SamePathListedWithTwoDigestsIsAMismatch
run "$name" 2 "$bin" scan --manifest twice/SHA256SUMS && pass "$name"
hf=hfdup/models--org--m
mkdir -p "$hf/blobs" "$hf/snapshots/rev" "$hf/refs"
y=$(sha256sum safe.pkl | cut -d' ' -f1)
x=$(printf '%064d' 7)
cp safe.pkl "$hf/blobs/$y" && ln "$hf/blobs/$y" "$hf/blobs/$x"
ln -s "../../blobs/$y" "$hf/snapshots/rev/a.pkl"
ln -s "../../blobs/$x" "$hf/snapshots/rev/b.pkl"
name=CacheBlobLinkedToAnotherBlobIsAMismatch
if run "$name" 2 "$bin" scan "$hf"; then
  contains out.txt "digest_mismatch" && pass "$name" || fail "$name" "$(cat out.txt)"
fi

# -j: files scanned at once give the same report, in the same order, as one after another: the
# whole fixture corpus (indexes and their shards, Hugging Face caches, duplicates by identity,
# skipped paths), compared byte for byte with -j 1.
name=ParallelScanIsTheSequentialReport
"$bin" scan -j 1 --format json "$fixtures" >seq.json 2>/dev/null
seq_rc=$?
"$bin" scan -j 3 --format json "$fixtures" >par.json 2>/dev/null
par_rc=$?
if [[ $seq_rc == "$par_rc" ]] && cmp -s seq.json par.json && [[ $(grep -c '"path"' seq.json) -gt 500 ]]; then
  pass "$name"
else
  fail "$name" "exit $seq_rc vs $par_rc; $(diff seq.json par.json | head -20)"
fi
run "-j 0" 64 "$bin" scan -j 0 "$fixtures" && pass "-j 0 is a usage error"

finish
