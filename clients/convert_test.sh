#!/usr/bin/env bash
# End-to-end checks of `ckptscan convert` on the torch fixtures, jailed and unjailed.
#   clients/convert_test.sh path/to/ckptscan path/to/fixtures path/to/check_safetensors.py
# Each case names the scenario it proves; the script fails if any case fails.
set -uo pipefail

bin="${1:?usage: convert_test.sh path/to/ckptscan path/to/fixtures path/to/check_safetensors.py}"
fixtures="${2:?fixtures folder}"
check="${3:?check_safetensors.py}"
bin="$(realpath "$bin")"; fixtures="$(realpath "$fixtures")"; check="$(realpath "$check")"
py=/usr/bin/python3
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/test_lib.sh"
enter_tmp
# Nothing but the expected files in the output folder (no temporary left behind).
only() {
  local want="$1" got
  got="$(cd out && ls -A | tr '\n' ' ')"
  [[ "$got" == "$want" ]]
}

seq="$fixtures/torch/sequential.pt"
tied="$fixtures/torch/tied.pt"
evil="$fixtures/pickles/malicious/reduce_posix_system.pkl"

for mode in jailed unjailed; do
  flags=()
  [[ $mode == unjailed ]] && flags=(--no-sandbox)
  rm -rf out && mkdir out

  name="$mode: sequential.pt converts (exit 0, valid safetensors, provenance)"
  if run "$name" 0 "$bin" convert "${flags[@]}" "$seq" -o out/seq.safetensors; then
    if ! grep -qF "SAFE" out.txt; then fail "$name" "no report: $(cat out.txt)"
    elif ! "$py" "$check" out/seq.safetensors "$seq" --tensors 9 >chk.txt 2>&1; then
      fail "$name" "$(cat chk.txt)"
    else pass "$name"; fi
  fi

  name="$mode: tied.pt converts, the tied weight stored once and aliased"
  if run "$name" 0 "$bin" convert "${flags[@]}" "$tied" -o out/tied.safetensors; then
    if ! "$py" "$check" out/tied.safetensors "$tied" --tensors 3 \
        --alias encoder.embed.weight=decoder.lm_head.weight >chk.txt 2>&1; then
      fail "$name" "$(cat chk.txt)"
    else pass "$name"; fi
  fi

  name="$mode: a malicious pickle exits 1 and writes nothing"
  if run "$name" 1 "$bin" convert "${flags[@]}" "$evil" -o out/evil.safetensors; then
    if [[ -e out/evil.safetensors ]]; then fail "$name" "output written"
    elif ! grep -qF "DANGEROUS" out.txt; then fail "$name" "no report: $(cat out.txt)"
    else pass "$name"; fi
  fi

  name="$mode: --max-output-bytes under the output refuses it naming the limit, writes nothing"
  if run "$name" 2 "$bin" convert "${flags[@]}" "$seq" -o out/capped.safetensors \
      --max-output-bytes 100; then
    if [[ -e out/capped.safetensors ]]; then fail "$name" "output written"
    elif ! grep -qF "over the 100 this conversion may write (max_output_bytes)" err.txt; then
      fail "$name" "message: $(cat err.txt)"
    else pass "$name"; fi
  fi

  # The boundary: exactly the output's size converts (to the same bytes); one byte less does not.
  exact=$(stat -c %s out/seq.safetensors)
  name="$mode: --max-output-bytes of exactly the output's size converts it"
  if run "$name" 0 "$bin" convert "${flags[@]}" "$seq" -o out/exact.safetensors \
      --max-output-bytes "$exact"; then
    cmp -s out/exact.safetensors out/seq.safetensors && pass "$name" ||
      fail "$name" "the output differs from the uncapped conversion"
  fi
  rm -f out/exact.safetensors
  name="$mode: --max-output-bytes one byte under the output refuses it"
  if run "$name" 2 "$bin" convert "${flags[@]}" "$seq" -o out/short.safetensors \
      --max-output-bytes "$((exact - 1))"; then
    [[ ! -e out/short.safetensors ]] && grep -qF "(max_output_bytes)" err.txt && pass "$name" ||
      fail "$name" "$(cat err.txt)"
  fi

  name="$mode: --max-output-bytes 0 is a usage error (exit 64)"
  if run "$name" 64 "$bin" convert "${flags[@]}" "$seq" -o out/zero.safetensors \
      --max-output-bytes 0; then
    if [[ -e out/zero.safetensors ]]; then fail "$name" "output written"
    else pass "$name"; fi
  fi

  name="$mode: an existing OUT is not overwritten without --force (exit 2)"
  printf 'keep me' >out/tied.safetensors
  if run "$name" 2 "$bin" convert "${flags[@]}" "$tied" -o out/tied.safetensors; then
    if [[ "$(cat out/tied.safetensors)" != "keep me" ]]; then fail "$name" "OUT changed"
    elif ! grep -qF -- "--force" err.txt; then fail "$name" "no hint: $(cat err.txt)"
    else pass "$name"; fi
  fi

  name="$mode: --force replaces an existing OUT"
  if run "$name" 0 "$bin" convert "${flags[@]}" "$tied" -o out/tied.safetensors --force; then
    if ! "$py" "$check" out/tied.safetensors "$tied" --tensors 3 >chk.txt 2>&1; then
      fail "$name" "$(cat chk.txt)"
    else pass "$name"; fi
  fi

  name="$mode: a tensor safetensors cannot hold fails (exit 2), nothing written"
  if run "$name" 2 "$bin" convert "${flags[@]}" "$fixtures/torch/sparse.pt" \
      -o out/q.safetensors; then
    if [[ -e out/q.safetensors ]]; then fail "$name" "output written"
    else pass "$name"; fi
  fi

  name="$mode: no temporary file is left in OUT's folder"
  if only "seq.safetensors tied.safetensors "; then pass "$name"
  else fail "$name" "folder holds: $(ls -A out)"; fi
done

name="jailed and unjailed outputs are byte-identical"
rm -rf out && mkdir out
"$bin" convert "$seq" -o out/a.safetensors >/dev/null 2>&1
"$bin" convert --no-sandbox "$seq" -o out/b.safetensors >/dev/null 2>&1
if cmp -s out/a.safetensors out/b.safetensors; then pass "$name"
else fail "$name" "outputs differ or are missing"; fi

name="--dtype bf16: float tensors become BF16, jailed and unjailed outputs identical"
"$bin" convert --dtype bf16 "$seq" -o out/bf_a.safetensors >/dev/null 2>&1
"$bin" convert --no-sandbox --dtype bf16 "$seq" -o out/bf_b.safetensors >/dev/null 2>&1
if cmp -s out/bf_a.safetensors out/bf_b.safetensors \
    && head -c 2000 out/bf_a.safetensors | grep -q '"BF16"' \
    && ! head -c 2000 out/bf_a.safetensors | grep -q '"F32"' \
    && head -c 2000 out/bf_a.safetensors | grep -q '"I64"'; then
  pass "$name"
else
  fail "$name" "outputs differ or dtypes unexpected"
fi

name="--select KEY keeps only that subtree; an unknown KEY fails (exit 2), nothing written"
rm -rf out && mkdir out
train="$fixtures/torch/train_checkpoint.pt"
if run "$name" 0 "$bin" convert "$train" -o out/model.safetensors --select model; then
  if ! "$py" "$check" out/model.safetensors "$train" --tensors 9 >chk.txt 2>&1; then
    fail "$name" "$(cat chk.txt)"
  elif run "$name" 2 "$bin" convert "$train" -o out/none.safetensors --select nope; then
    if [[ -e out/none.safetensors ]]; then fail "$name" "output written"; else pass "$name"; fi
  fi
fi

name="a missing OUT folder fails (exit 2) before anything is written"
if run "$name" 2 "$bin" convert "$seq" -o nowhere/x.safetensors; then pass "$name"; fi

name="values that are not tensors are listed as not written (JSON report)"
rm -rf out && mkdir out
if run "$name" 0 "$bin" convert -f json "$train" -o out/all.safetensors; then
  if "$py" - out.txt <<'PY' >chk.txt 2>&1; then pass "$name"; else fail "$name" "$(cat chk.txt)"; fi
import json, sys
c = json.load(open(sys.argv[1]))["files"][0]["conversion"]
paths = {n["path"]: n["type"] for n in c["not_written"]}
want = {"epoch": "int", "best_loss": "float", "args": "argparse.Namespace",
        "when": "datetime.datetime", "dtype": "global torch.float16",
        "optimizer.param_groups.0.lr": "float", "history.1": "float"}
for k, v in want.items():
    assert paths.get(k) == v, (k, paths.get(k))
assert c["not_written_total"] == len(c["not_written"]), c["not_written_total"]
assert c["tensors"] >= 9 and c["dtype"] == "keep", c
PY
fi

# docs/safetensors.md, "Dtypes: what is written": safetensors 0.4.5 (Debian 13) cannot read a
# file holding C64, so complex64 is written as F32 [..., 2] unless --allow-dtype C64.
dtypes="$fixtures/dtypes/dtypes_torch26.pt"
name="complex64 is written as F32 [..., 2], listed in __metadata__; the report says so per dtype"
if run "$name" 0 "$bin" convert -f json "$dtypes" -o out/dt.safetensors; then
  if "$py" - out.txt out/dt.safetensors <<'PY' >chk.txt 2>&1; then pass "$name"; else fail "$name" "$(cat chk.txt)"; fi
import json, struct, sys
c = json.load(open(sys.argv[1]))["files"][0]["conversion"]
uses = {d["source"]: (d["written"], d["how"], d["tensors"]) for d in c["dtypes"]}
assert uses["complex64"] == ("F32", "as-real", 4), uses
assert uses["uint16"] == ("U16", "as-is", 1) and uses["uint64"] == ("U64", "as-is", 1), uses
assert uses["float8_e4m3fn"] == ("F8_E4M3", "as-is", 1), uses
assert sum(u[2] for u in uses.values()) == c["tensors"] == 19, (uses, c["tensors"])
data = open(sys.argv[2], "rb").read()
(n,) = struct.unpack("<Q", data[:8])
h = json.loads(data[8:8 + n])
assert all(t["dtype"] != "C64" for k, t in h.items() if k != "__metadata__"), h
assert h["complex64"]["dtype"] == "F32" and h["complex64"]["shape"] == [2, 3, 2], h["complex64"]
assert h["complex64_scalar"]["shape"] == [2], h["complex64_scalar"]
assert json.loads(h["__metadata__"]["ckptscan.complex64_as_real"]) == [
    "complex64", "complex64_empty", "complex64_scalar", "complex64_transposed"], h["__metadata__"]
PY
fi
name="the text report names what each dtype became"
if run "$name" 0 "$bin" convert "$dtypes" -o out/dt_text.safetensors; then
  if ! contains out.txt "complex64 -> F32 [..., 2] (as real:"; then fail "$name" "$(cat out.txt)"
  elif ! contains out.txt "uint32 -> U32: 1 tensor"; then fail "$name" "$(cat out.txt)"
  else pass "$name"; fi
fi
name="--allow-dtype C64 writes complex64 as C64, reported as allowed"
if run "$name" 0 "$bin" convert -f json --allow-dtype C64 "$dtypes" -o out/c64.safetensors; then
  if ! head -c 2000 out/c64.safetensors | grep -q '"C64"'; then fail "$name" "no C64 written"
  elif head -c 2000 out/c64.safetensors | grep -q 'complex64_as_real'; then
    fail "$name" "as-real recorded"
  elif ! contains out.txt '"how": "allowed"'; then fail "$name" "$(cat out.txt)"
  else pass "$name"; fi
fi
name="--cast-quantized without --dtype bf16 is a usage error (exit 64), nothing written"
if run "$name" 64 "$bin" convert --cast-quantized "$dtypes" -o out/bad.safetensors; then
  if [[ -e out/bad.safetensors ]]; then fail "$name" "output written"
  elif ! contains err.txt "only means something with --dtype bf16"; then fail "$name" "$(cat err.txt)"
  else pass "$name"; fi
fi
for bad in U16 F32 c64 X; do
  name="--allow-dtype $bad is a usage error (exit 64), nothing written"
  if run "$name" 64 "$bin" convert --allow-dtype "$bad" "$dtypes" -o out/bad.safetensors; then
    if [[ -e out/bad.safetensors ]]; then fail "$name" "output written"
    elif ! contains err.txt "--allow-dtype takes only C64"; then fail "$name" "$(cat err.txt)"
    else pass "$name"; fi
  fi
done

name="--strict refuses a checkpoint with non-tensor values (exit 2), nothing written"
if run "$name" 2 "$bin" convert --strict "$train" -o out/strict.safetensors; then
  if [[ -e out/strict.safetensors ]]; then fail "$name" "output written"
  elif ! contains err.txt "--strict"; then fail "$name" "no reason: $(cat err.txt)"
  else pass "$name"; fi
fi

name="--strict with --select of a pure state dict converts"
if run "$name" 0 "$bin" convert --strict --select model "$train" -o out/strict.safetensors; then
  pass "$name"
fi

# ------------------------------------------------------------------ sharded sets
index="$fixtures/torch/sharded/pytorch_model.bin.index.json"
# A copy of the sharded fixture that a case may break.
copy_set() {
  rm -rf set && mkdir set && cp "$fixtures"/torch/sharded/* set/
}
# OUT's parent holds nothing but OUT (no staging directory left behind).
only_out() {
  local got
  got="$(ls -A . | grep -v -e '^out.txt$' -e '^err.txt$' -e '^chk.txt$' -e '^set$' \
        -e '^out$' -e '^a$' -e '^b$' | tr '\n' ' ')"
  [[ -z "$got" ]] || { echo "left behind: $got"; return 1; }
}
check_set() {  # check_set DIR: every shard valid and against its source; the index covers all
  "$py" - "$1" "$fixtures/torch/sharded" "$check" <<'PY'
import json, os, subprocess, sys
out, src, check = sys.argv[1:4]
idx = json.load(open(os.path.join(out, "model.safetensors.index.json")))
files = sorted(set(idx["weight_map"].values()))
assert files == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"], files
assert sorted(os.listdir(out)) == files + ["model.safetensors.index.json"], os.listdir(out)
old = json.load(open(os.path.join(src, "pytorch_model.bin.index.json")))
assert set(idx["weight_map"]) == set(old["weight_map"]), "names differ"
assert idx["metadata"]["total_size"] == old["metadata"]["total_size"]
for i, f in enumerate(files):
    shard = os.path.join(src, "pytorch_model-%05d-of-00002.bin" % (i + 1))
    n = sum(1 for v in idx["weight_map"].values() if v == f)
    subprocess.run([sys.executable, check, os.path.join(out, f), shard, "--tensors", str(n)],
                   check=True)
PY
}

for mode in jailed unjailed; do
  flags=()
  [[ $mode == unjailed ]] && flags=(--no-sandbox)
  rm -rf out a b set

  name="$mode: a sharded checkpoint converts as a set with its new index"
  if run "$name" 0 "$bin" convert "${flags[@]}" "$index" -o out; then
    if ! check_set out >chk.txt 2>&1; then fail "$name" "$(cat chk.txt)"
    elif ! only_out >chk.txt; then fail "$name" "$(cat chk.txt)"
    else pass "$name"; fi
  fi

  name="$mode: an empty OUT directory is filled; a non-empty one is refused (exit 2)"
  rm -rf out && mkdir out
  if run "$name" 0 "$bin" convert "${flags[@]}" "$index" -o out && check_set out >chk.txt 2>&1; then
    if run "$name" 2 "$bin" convert "${flags[@]}" --force "$index" -o out; then
      if ! contains err.txt "not empty"; then fail "$name" "no reason: $(cat err.txt)"
      elif ! check_set out >chk.txt 2>&1; then fail "$name" "OUT changed: $(cat chk.txt)"
      else pass "$name"; fi
    fi
  else fail "$name" "empty OUT not filled: $(cat err.txt chk.txt 2>/dev/null)"; fi

  name="$mode: a missing shard fails the set (exit 2), nothing left"
  rm -rf out && copy_set && rm set/pytorch_model-00002-of-00002.bin
  if run "$name" 2 "$bin" convert "${flags[@]}" set/pytorch_model.bin.index.json -o out; then
    if [[ -e out ]]; then fail "$name" "OUT exists"
    elif ! only_out >chk.txt; then fail "$name" "$(cat chk.txt)"
    else pass "$name"; fi
  fi

  name="$mode: an index that maps a tensor to the wrong shard fails the set, nothing left"
  rm -rf out && copy_set
  sed -i 's/"3.bias": "pytorch_model-00002/"3.bias": "pytorch_model-00001/' \
    set/pytorch_model.bin.index.json
  if run "$name" 2 "$bin" convert "${flags[@]}" set/pytorch_model.bin.index.json -o out; then
    if [[ -e out ]]; then fail "$name" "OUT exists"
    elif ! contains err.txt "3.bias"; then fail "$name" "no reason: $(cat err.txt)"
    elif ! only_out >chk.txt; then fail "$name" "$(cat chk.txt)"
    else pass "$name"; fi
  fi

  name="$mode: a malicious shard makes the set DANGEROUS (exit 1), nothing left"
  rm -rf out && copy_set && cp "$evil" set/pytorch_model-00002-of-00002.bin
  if run "$name" 1 "$bin" convert "${flags[@]}" set/pytorch_model.bin.index.json -o out; then
    if [[ -e out ]]; then fail "$name" "OUT exists"
    elif ! contains out.txt "DANGEROUS"; then fail "$name" "no report: $(cat out.txt)"
    elif ! only_out >chk.txt; then fail "$name" "$(cat chk.txt)"
    else pass "$name"; fi
  fi

  name="$mode: an index naming a shard outside its directory is an ERROR (exit 2)"
  rm -rf out && copy_set
  sed -i 's#"3.bias": "pytorch_model#"3.bias": "../pytorch_model#' set/pytorch_model.bin.index.json
  if run "$name" 2 "$bin" convert "${flags[@]}" set/pytorch_model.bin.index.json -o out; then
    if [[ -e out ]]; then fail "$name" "OUT exists"
    elif ! contains out.txt "not a plain file name"; then fail "$name" "$(cat out.txt)"
    else pass "$name"; fi
  fi
done

name="sharded sets: jailed and unjailed outputs are byte-identical"
rm -rf a b
"$bin" convert "$index" -o a >/dev/null 2>&1
"$bin" convert --no-sandbox "$index" -o b >/dev/null 2>&1
if [[ -d a && -d b ]] && diff -r a b >/dev/null; then pass "$name"
else fail "$name" "outputs differ or are missing"; fi

finish
