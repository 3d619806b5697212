#!/usr/bin/env bash
# Cross-checks our OMS bundles with tools that share no code with us: the python3 standard
# library takes the bundle apart, the openssl CLI verifies the ECDSA signature over a PAE built
# here with printf, and sha256sum checks every file (and every shard) digest.
#
#   openssl_crosscheck.sh path/to/oms_tool
set -euo pipefail

tool="$(realpath "$1")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"

fail() { echo "FAIL: $*" >&2; exit 1; }

# Splits BUNDLE into payload.json (raw statement bytes), sig.der, hint.txt and checklist.txt
# ("<digest>  <name>" lines, the sha256sum -c format) for the resources.
extract() {
  python3 - "$1" <<'PY'
import base64, json, sys
bundle = json.load(open(sys.argv[1], "rb"))
env = bundle["dsseEnvelope"]
assert bundle["mediaType"] == "application/vnd.dev.sigstore.bundle.v0.3+json"
assert env["payloadType"] == "application/vnd.in-toto+json"
payload = base64.b64decode(env["payload"], validate=True)
open("payload.json", "wb").write(payload)
open("sig.der", "wb").write(base64.b64decode(env["signatures"][0]["sig"], validate=True))
open("hint.txt", "w").write(bundle["verificationMaterial"]["publicKey"]["hint"] + "\n")
st = json.loads(payload)
assert st["_type"] == "https://in-toto.io/Statement/v1"
assert st["predicateType"] == "https://model_signing/signature/v1.0"
with open("checklist.txt", "w") as f:
    for r in st["predicate"]["resources"]:
        f.write("%s  %s\n" % (r["digest"], r["name"]))
open("root.txt", "w").write(st["subject"][0]["digest"]["sha256"] + "\n")
open("rawdigests.bin", "wb").write(
    b"".join(bytes.fromhex(r["digest"]) for r in st["predicate"]["resources"]))
PY
}

# DSSE v1 PAE from the raw payload, by hand.
pae() {
  printf 'DSSEv1 %d %s %d ' 28 'application/vnd.in-toto+json' "$(wc -c < payload.json)" > pae.bin
  cat payload.json >> pae.bin
}

"$tool" keygen key.pem pub.pem > /dev/null
[[ "$(stat -c %a key.pem)" == 600 ]] || fail "private key mode is $(stat -c %a key.pem)"
openssl pkey -in key.pem -noout -text 2>/dev/null | grep -q 'NIST CURVE: P-256' ||
  fail "key is not P-256"

mkdir -p model/sub "model/with space"
printf 'config' > model/config.json
head -c 70000 /dev/urandom > model/sub/weights.bin
printf 'x' > "model/with space/tok en.txt"
: > model/empty

# --- files method -----------------------------------------------------------------------
"$tool" sign model key.pem model/model.sig
extract model/model.sig
pae
openssl dgst -sha256 -verify pub.pem -signature sig.der pae.bin | grep -qx 'Verified OK' ||
  fail "openssl does not verify our signature"
[[ "$(sha256sum < pub.pem | cut -d' ' -f1)" == "$(cat hint.txt)" ]] ||
  fail "publicKey.hint is not the SHA-256 of the PEM public key"
(cd model && sha256sum --quiet --strict -c ../checklist.txt) || fail "file digests differ"
[[ "$(openssl dgst -sha256 -r rawdigests.bin | cut -d' ' -f1)" == "$(cat root.txt)" ]] ||
  fail "subject digest is not SHA-256 over the raw resource digests"
# The resources are exactly the files, minus the signature.
diff <(cut -d' ' -f3- checklist.txt | sort) \
     <(cd model && find . -type f ! -name model.sig | sed 's|^\./||' | sort) ||
  fail "resources and files differ"
"$tool" verify model model/model.sig --key pub.pem > /dev/null || fail "oms_tool verify"

# A changed payload byte breaks the signature for openssl too.
printf 'X' | dd of=payload.json bs=1 seek=40 conv=notrunc status=none
pae
if openssl dgst -sha256 -verify pub.pem -signature sig.der pae.bin > /dev/null 2>&1; then
  fail "openssl verified a tampered payload"
fi
# And a changed model byte is caught by our verifier, naming the file.
printf 'C' | dd of=model/config.json bs=1 seek=0 conv=notrunc status=none
if out="$("$tool" verify model model/model.sig --key pub.pem 2>&1)"; then
  fail "tampered model verified"
fi
grep -q 'file "config.json": digest mismatch' <<< "$out" || fail "unexpected error: $out"
printf 'c' | dd of=model/config.json bs=1 seek=0 conv=notrunc status=none

# --- shards method ----------------------------------------------------------------------
rm model/model.sig
"$tool" sign model key.pem shards.sig --shards 16384
extract shards.sig
pae
openssl dgst -sha256 -verify pub.pem -signature sig.der pae.bin | grep -qx 'Verified OK' ||
  fail "openssl does not verify our shards signature"
grep -q '"shard_size": 16384,' payload.json || fail "shard_size not recorded"
n=0
while read -r digest name; do
  range="${name##*:}"; rest="${name%:*}"; start="${rest##*:}"; path="${rest%:*}"
  end="$range"
  got="$(dd if="model/$path" iflag=skip_bytes,count_bytes skip="$start" count="$((end - start))" \
           bs=65536 status=none | sha256sum | cut -d' ' -f1)"
  [[ "$got" == "$digest" ]] || fail "shard $name: sha256sum $got, signed $digest"
  n=$((n + 1))
done < checklist.txt
# 70000 bytes in 16384-byte shards = 5; plus one shard each for the two small files.
[[ "$n" == 7 ]] || fail "expected 7 shard resources, found $n"
"$tool" verify model shards.sig --key pub.pem > /dev/null || fail "oms_tool verify (shards)"

echo "openssl_crosscheck: OK"
