#!/usr/bin/env bash
# End-to-end checks of `ckptscan convert` on the torch fixtures, jailed and in-process.
#   clients/convert_test.sh path/to/ckptscan path/to/fixtures path/to/check_safetensors.py
# Each case names the scenario it proves; the script fails if any case fails.
set -uo pipefail

bin="${1:?usage: convert_test.sh path/to/ckptscan path/to/fixtures path/to/check_safetensors.py}"
fixtures="${2:?fixtures folder}"
check="${3:?check_safetensors.py}"
bin="$(realpath "$bin")"; fixtures="$(realpath "$fixtures")"; check="$(realpath "$check")"
py=/usr/bin/python3
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1

source "$here/test_lib.sh"
# Nothing but the expected files in the output folder (no temporary left behind).
only() {
  local want="$1" got
  got="$(cd out && ls -A | tr '\n' ' ')"
  [[ "$got" == "$want" ]]
}

seq="$fixtures/torch/sequential.pt"
tied="$fixtures/torch/tied.pt"
evil="$fixtures/pickles/malicious/reduce_posix_system.pkl"

for mode in jailed in-process; do
  flags=()
  [[ $mode == in-process ]] && flags=(--no-sandbox)
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
  if run "$name" 2 "$bin" convert "${flags[@]}" "$fixtures/torch/quantized.pt" \
      -o out/q.safetensors; then
    if [[ -e out/q.safetensors ]]; then fail "$name" "output written"
    else pass "$name"; fi
  fi

  name="$mode: no temporary file is left in OUT's folder"
  if only "seq.safetensors tied.safetensors "; then pass "$name"
  else fail "$name" "folder holds: $(ls -A out)"; fi
done

name="jailed and in-process outputs are byte-identical"
rm -rf out && mkdir out
"$bin" convert "$seq" -o out/a.safetensors >/dev/null 2>&1
"$bin" convert --no-sandbox "$seq" -o out/b.safetensors >/dev/null 2>&1
if cmp -s out/a.safetensors out/b.safetensors; then pass "$name"
else fail "$name" "outputs differ or are missing"; fi

name="--dtype bf16: float tensors become BF16, jailed and in-process outputs identical"
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

finish
