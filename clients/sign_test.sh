#!/usr/bin/env bash
# End-to-end checks of `ckptscan keygen`, `convert --key` and `verify`.
#   clients/sign_test.sh path/to/ckptscan path/to/fixtures
# Each case names the scenario it proves; the script fails if any case fails. The signature is
# also checked without ckptscan: the DSSE pre-authentication encoding is rebuilt with python's
# stdlib and verified with `openssl dgst -verify`, each signed digest with sha256sum.
set -uo pipefail

bin="${1:?usage: sign_test.sh path/to/ckptscan path/to/fixtures}"
fixtures="${2:?fixtures folder}"
bin="$(realpath "$bin")"; fixtures="$(realpath "$fixtures")"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/test_lib.sh"
enter_tmp

seq="$fixtures/torch/sequential.pt"
tied="$fixtures/torch/tied.pt"
index="$fixtures/torch/sharded/pytorch_model.bin.index.json"
evil="$fixtures/pickles/malicious/reduce_posix_system.pkl"

name="keygen creates a 0600 private key and its public key"
if run "$name" 0 "$bin" keygen -o key.pem; then
  if [[ "$(stat -c %a key.pem)" != 600 ]]; then fail "$name" "mode $(stat -c %a key.pem)"
  elif ! openssl pkey -in key.pem -noout 2>/dev/null; then fail "$name" "not a key"
  elif ! openssl pkey -pubin -in key.pub.pem -noout 2>/dev/null; then fail "$name" "no public key"
  else pass "$name"; fi
fi

name="a public key under keygen's old name (KEY.pem.pub) is accepted, with a warning"
cp key.pub.pem key.pem.pub
if run "$name" 2 "$bin" verify missing.safetensors --pubkey key.pem.pub; then
  contains err.txt "old public-key name" && pass "$name" || fail "$name" "$(cat err.txt)"
fi

name="keygen never overwrites a key (exit 2)"
cp key.pem key.before
if run "$name" 2 "$bin" keygen -o key.pem; then
  if cmp -s key.pem key.before; then pass "$name"; else fail "$name" "key changed"; fi
fi
"$bin" keygen -o other.pem >/dev/null

name="a key others can read is refused before anything is scanned (exit 64)"
cp key.pem loose.pem && chmod 644 loose.pem
if run "$name" 64 "$bin" convert --key loose.pem "$seq" -o loose.safetensors; then
  if [[ -e loose.safetensors ]]; then fail "$name" "output written"
  elif ! contains err.txt "mode 0644"; then fail "$name" "no reason: $(cat err.txt)"
  else pass "$name"; fi
fi

for mode in jailed unjailed; do
  flags=()
  [[ $mode == unjailed ]] && flags=(--no-sandbox)
  rm -rf m set && mkdir m

  name="$mode: convert --key signs a file (OUT.sig) and verify accepts it"
  if run "$name" 0 "$bin" convert "${flags[@]}" --key key.pem "$seq" -o m/seq.safetensors; then
    if [[ ! -s m/seq.safetensors.sig ]]; then fail "$name" "no signature"
    elif run "$name" 0 "$bin" verify m/seq.safetensors --pubkey key.pub.pem; then
      if contains out.txt "OK"; then pass "$name"; else fail "$name" "$(cat out.txt)"; fi
    fi
  fi

  name="$mode: convert --key signs a sharded set (model.sig inside) and verify accepts it"
  if run "$name" 0 "$bin" convert "${flags[@]}" --key key.pem "$index" -o set; then
    if [[ ! -s set/model.sig ]]; then fail "$name" "no signature"
    elif run "$name" 0 "$bin" verify set --pubkey key.pub.pem; then
      if contains out.txt "3 signed files"; then pass "$name"; else fail "$name" "$(cat out.txt)"; fi
    fi
  fi

  name="$mode: --sign-method shards (small shards, the header's recomputed) verifies"
  if run "$name" 0 "$bin" convert "${flags[@]}" --key key.pem --sign-method shards \
      --sign-shard-size 256 "$seq" -o m/sh.safetensors; then
    if run "$name" 0 "$bin" verify m/sh.safetensors --pubkey key.pub.pem; then
      if ! contains out.txt "4 signed shards"; then fail "$name" "$(cat out.txt)"
      else
        flip() { printf '\x01' | dd of="$1" bs=1 seek="$2" conv=notrunc status=none; }
        flip m/sh.safetensors 900
        if run "$name" 1 "$bin" verify m/sh.safetensors --pubkey key.pub.pem; then
          if contains err.txt "768:1012"; then pass "$name"; else fail "$name" "$(cat err.txt)"; fi
        fi
      fi
    fi
  fi

  name="$mode: a sharded set signed with --sign-method shards verifies"
  rm -rf set3
  if run "$name" 0 "$bin" convert "${flags[@]}" --key key.pem --sign-method shards \
      --sign-shard-size 200 "$index" -o set3; then
    if run "$name" 0 "$bin" verify set3 --pubkey key.pub.pem; then pass "$name"; fi
  fi

  name="$mode: a malicious input is not converted and nothing is signed (exit 1)"
  if run "$name" 1 "$bin" convert "${flags[@]}" --key key.pem "$evil" -o m/evil.safetensors; then
    if [[ -e m/evil.safetensors || -e m/evil.safetensors.sig ]]; then fail "$name" "written"
    else pass "$name"; fi
  fi
done

# An independent check: the PAE rebuilt outside ckptscan, the signature verified by openssl.
name="openssl verifies the signature over the rebuilt PAE; sha256sum matches every digest"
if /usr/bin/python3 - set/model.sig <<'PY' >chk.txt 2>&1 \
    && openssl dgst -sha256 -verify key.pub.pem -signature sig.der pae.bin >>chk.txt 2>&1 \
    && (cd set && sha256sum -c ../sums.txt) >>chk.txt 2>&1; then
import base64, json, sys
b = json.load(open(sys.argv[1]))
env = b["dsseEnvelope"]
payload = base64.b64decode(env["payload"])
ptype = env["payloadType"].encode()
open("pae.bin", "wb").write(b"DSSEv1 %d %s %d %s" % (len(ptype), ptype, len(payload), payload))
open("sig.der", "wb").write(base64.b64decode(env["signatures"][0]["sig"]))
st = json.loads(payload)
with open("sums.txt", "w") as f:
    for r in st["predicate"]["resources"]:
        f.write("%s  %s\n" % (r["digest"], r["name"]))
assert len(st["predicate"]["resources"]) == 3, st["predicate"]["resources"]
PY
  pass "$name"
else
  fail "$name" "$(cat chk.txt)"
fi

# Tampering: each must fail verification (exit 1) and say what failed.
tamper() {  # tamper NAME WANT_TEXT CMD... : on a fresh copy of the signed set in t/
  local name="$1" want="$2"
  shift 2
  rm -rf t && cp -r set t
  "$@"
  if run "$name" 1 "$bin" verify t --pubkey key.pub.pem; then
    if contains err.txt "$want"; then pass "$name"; else fail "$name" "message: $(cat err.txt)"; fi
  fi
}
flip() { printf '\x01' | dd of="$1" bs=1 seek="$2" conv=notrunc status=none; }
tamper "tampering: one flipped byte in a shard is a digest mismatch" "digest mismatch" \
  flip t/model-00002-of-00002.safetensors 600
tamper "tampering: a changed index file is a digest mismatch" "model.safetensors.index.json" \
  sed -i 's/"total_size": 132/"total_size": 133/' t/model.safetensors.index.json
tamper "tampering: a renamed file is reported missing" "missing" \
  mv t/model-00001-of-00002.safetensors t/model-00001-of-00003.safetensors
tamper "tampering: an added file is reported as unsigned" "unsigned" \
  cp "$seq" t/extra.bin
rm -rf set2 && "$bin" convert --key key.pem "$index" --dtype bf16 -o set2 >/dev/null 2>&1
tamper "tampering: another model's bundle does not match" "digest mismatch" \
  cp set2/model.sig t/model.sig

name="tampering: a bundle signed with another key is refused"
rm -rf t && cp -r set t
if run "$name" 1 "$bin" verify t --pubkey other.pub.pem; then
  if contains err.txt "key"; then pass "$name"; else fail "$name" "message: $(cat err.txt)"; fi
fi

name="a garbled bundle is malformed (exit 2)"
rm -rf t && cp -r set t && printf '{"mediaType": ' >t/model.sig
if run "$name" 2 "$bin" verify t --pubkey key.pub.pem; then pass "$name"; fi

# The certificate method: a CA made here with openssl(1) certifies key.pem's public key.
name="convert --key --cert signs with the certificate method; verify --cert-chain CA accepts it"
openssl ecparam -name prime256v1 -genkey -noout -out ca.key 2>/dev/null
openssl req -x509 -new -key ca.key -subj "/CN=ckptscan test CA" -days 2 -out ca.pem \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign" 2>/dev/null
openssl req -new -key key.pem -subj "/CN=ckptscan signer" -out leaf.csr 2>/dev/null
printf 'keyUsage=critical,digitalSignature\nextendedKeyUsage=codeSigning\n' >leaf.ext
openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 \
  -extfile leaf.ext -out leaf.pem 2>/dev/null
rm -rf cm && mkdir cm
if run "$name" 0 "$bin" convert --key key.pem --cert leaf.pem "$seq" -o cm/c.safetensors; then
  if run "$name" 0 "$bin" verify cm/c.safetensors --cert-chain ca.pem; then
    if contains out.txt "certificate method"; then pass "$name"; else fail "$name" "$(cat out.txt)"; fi
  fi
fi

name="a certificate bundle is refused under another CA (exit 1)"
openssl ecparam -name prime256v1 -genkey -noout -out ca2.key 2>/dev/null
openssl req -x509 -new -key ca2.key -subj "/CN=other CA" -days 2 -out ca2.pem \
  -addext "basicConstraints=critical,CA:TRUE" 2>/dev/null
if run "$name" 1 "$bin" verify cm/c.safetensors --cert-chain ca2.pem; then pass "$name"; fi

name="--cert for another key is refused, nothing written (exit 2)"
if run "$name" 2 "$bin" convert --key other.pem --cert leaf.pem "$seq" -o cm/d.safetensors; then
  if [[ -e cm/d.safetensors ]]; then fail "$name" "output written"; else pass "$name"; fi
fi

name="verify without a trust anchor is a usage error (exit 64)"
if run "$name" 64 "$bin" verify set; then pass "$name"; fi

finish
