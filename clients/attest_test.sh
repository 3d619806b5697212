#!/usr/bin/env bash
# End-to-end checks of `ckptscan scan --attest` and `ckptscan verify-attestation`.
#   clients/attest_test.sh path/to/ckptscan
# Each case names the scenario it proves; the script fails if any case fails. The bundle is also
# checked without ckptscan: python's stdlib takes it apart and checks the statement, sha256sum
# the subjects, and `openssl dgst -verify` the signature over the DSSE pre-authentication
# encoding rebuilt with printf.
set -uo pipefail

bin="${1:?usage: attest_test.sh path/to/ckptscan}"
bin="$(realpath "$bin")"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/test_lib.sh"
enter_tmp

mkdir m
printf '\x80\x02}q\x00.' >m/safe.pkl              # {}: SAFE
printf "cmymodule\nMyClass\n)R." >m/odd.pkl       # an unlisted global: SUSPICIOUS
printf '\x80\x02}q\x00' >m/broken.pkl             # no STOP: ERROR, not read whole
"$bin" keygen -o key.pem >/dev/null
"$bin" keygen -o other.pem >/dev/null
verify() { "$bin" verify-attestation --bundle "$@"; }

name="--attest without --key is a usage error, nothing written (exit 64)"
if run "$name" 64 "$bin" scan --attest a.json m; then
  if [[ -e a.json ]]; then fail "$name" "a.json written"
  elif contains err.txt "--attest needs --key"; then pass "$name"; else fail "$name" "$(cat err.txt)"; fi
fi

name="--attest with --digest none is a usage error (exit 64)"
if run "$name" 64 "$bin" scan --attest a.json --key key.pem --digest none m; then
  contains err.txt "SHA-256" && pass "$name" || fail "$name" "$(cat err.txt)"
fi

name="--key without --attest is a usage error (exit 64)"
run "$name" 64 "$bin" scan --key key.pem m && pass "$name"

name="--attest into a folder that does not exist is a usage error before the scan (exit 64)"
if run "$name" 64 "$bin" scan --attest nowhere/a.json --key key.pem m; then
  [[ ! -s out.txt ]] && pass "$name" || fail "$name" "scanned: $(cat out.txt)"
fi

name="scan --attest writes a bundle for SAFE, SUSPICIOUS and ERROR files; scan's exit code"
if run "$name" 1 "$bin" scan --attest a.json --key key.pem m; then
  if [[ ! -s a.json ]]; then fail "$name" "no bundle"
  elif contains err.txt "attested: 3 files in a.json"; then pass "$name"
  else fail "$name" "$(cat err.txt)"; fi
fi

name="an existing OUT is never overwritten, and nothing is scanned (exit 2)"
cp a.json a.before
if run "$name" 2 "$bin" scan --attest a.json --key key.pem m; then
  if ! cmp -s a.json a.before; then fail "$name" "a.json changed"
  elif contains err.txt "exists; not scanning"; then pass "$name"; else fail "$name" "$(cat err.txt)"; fi
fi

name="a file whose name JSON cannot hold leaves no partial attestation (exit 2)"
mkdir u && cp m/safe.pkl "u/bad$(printf '\xff')name.pkl"
if run "$name" 2 "$bin" scan --attest u.json --key key.pem u; then
  if [[ -e u.json ]] || ls -A . | grep -q 'u.json'; then fail "$name" "something was written"
  elif contains err.txt "not valid UTF-8"; then pass "$name"; else fail "$name" "$(cat err.txt)"; fi
fi

name="round trip: the SAFE file verifies (exit 0)"
if run "$name" 0 verify a.json --key key.pub.pem m/safe.pkl; then
  contains out.txt "m/safe.pkl: SAFE as safe.pkl" && pass "$name" || fail "$name" "$(cat out.txt)"
fi

name="round trip: the SUSPICIOUS file fails the default policy, naming file and rule (exit 1)"
if run "$name" 1 verify a.json --key key.pub.pem m/odd.pkl; then
  contains err.txt "m/odd.pkl: recorded as SUSPICIOUS (rules global.unlisted)" && pass "$name" ||
    fail "$name" "$(cat err.txt)"
fi

name="round trip: --require-verdict SUSPICIOUS accepts it (exit 0)"
run "$name" 0 verify a.json --key key.pub.pem --require-verdict SUSPICIOUS m/odd.pkl m/safe.pkl &&
  pass "$name"

name="round trip: the ERROR file is not verified under any policy (exit 2)"
if run "$name" 2 verify a.json --key key.pub.pem --require-verdict SUSPICIOUS m/broken.pkl; then
  contains err.txt "recorded as ERROR (errors malformed)" && pass "$name" || fail "$name" "$(cat err.txt)"
fi

name="--require-verdict DANGEROUS is no policy (exit 64)"
run "$name" 64 verify a.json --key key.pub.pem --require-verdict DANGEROUS m/safe.pkl && pass "$name"

name="a folder: every file in it is checked, findings win over errors (exit 1)"
if run "$name" 1 verify a.json --key key.pub.pem m; then
  if contains err.txt "m/odd.pkl" && contains err.txt "m/broken.pkl"; then pass "$name"
  else fail "$name" "$(cat err.txt)"; fi
fi

name="a one-byte change of a file fails: its digest is no subject (exit 2)"
cp m/safe.pkl changed.pkl && printf '\x81' | dd of=changed.pkl bs=1 seek=0 conv=notrunc status=none
if run "$name" 2 verify a.json --key key.pub.pem changed.pkl; then
  contains err.txt "changed.pkl: its SHA-256" && pass "$name" || fail "$name" "$(cat err.txt)"
fi

name="a file that was never scanned fails (exit 2)"
printf '\x80\x02]q\x00.' >new.pkl
run "$name" 2 verify a.json --key key.pub.pem new.pkl && pass "$name"

name="a symlinked PATH is hashed through the link: to an attested file it passes"
ln -s m/safe.pkl link.pkl
run "$name" 0 verify a.json --key key.pub.pem link.pkl && pass "$name"

name="a symlinked PATH to another file fails (exit 2)"
ln -s new.pkl link2.pkl
run "$name" 2 verify a.json --key key.pub.pem link2.pkl && pass "$name"

name="another key is refused: wrong key (exit 2)"
if run "$name" 2 verify a.json --key other.pub.pem m/safe.pkl; then
  contains err.txt "wrong key" && pass "$name" || fail "$name" "$(cat err.txt)"
fi

name="--min-rules-version above the recorded rules fails (exit 1); at or below passes"
rules="$(python3 -c 'import json,base64,sys; b=json.load(open("a.json")); s=json.loads(base64.b64decode(b["dsseEnvelope"]["payload"])); print(s["predicate"]["verifier"]["ckptscanRules"]["version"])')"
if run "$name" 1 verify a.json --key key.pub.pem --min-rules-version 9999.1 m/safe.pkl; then
  if ! contains err.txt "older than --min-rules-version 9999.1"; then fail "$name" "$(cat err.txt)"
  elif run "$name" 0 verify a.json --key key.pub.pem --min-rules-version "$rules" m/safe.pkl &&
       run "$name" 0 verify a.json --key key.pub.pem --min-rules-version 2020.1 m/safe.pkl; then
    pass "$name"
  fi
fi

name="a --min-rules-version that is no version is a usage error (exit 64)"
run "$name" 64 verify a.json --key key.pub.pem --min-rules-version v2 m/safe.pkl && pass "$name"

# tamper F EXPR: a.json with python's `b` (the bundle) or `s` (the statement) edited by EXPR,
# the signature left alone, written to F.
tamper() {
  python3 - "$1" "$2" <<'PY'
import base64, json, sys
out, expr = sys.argv[1], sys.argv[2]
b = json.load(open("a.json"))
s = json.loads(base64.b64decode(b["dsseEnvelope"]["payload"]))
exec(expr)
b["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(s, indent=2).encode()).decode()
json.dump(b, open(out, "w"))
PY
}
for edit in 's["predicate"]["ckptscanFiles"][0]["verdict"]="SAFE"' \
            's["predicate"]["properties"]=["CKPTSCAN_VERDICT_SAFE"]' \
            's["subject"][1]["digest"]["sha256"]="0"*64' \
            's["predicate"]["verifier"]["ckptscanRules"]["version"]="9999.1"' \
            'b["dsseEnvelope"]["payloadType"]="application/json"' \
            'b["verificationMaterial"]["publicKey"]["hint"]="0"*64'; do
  name="a tampered bundle is refused (exit 2): $edit"
  tamper t.json "$edit"
  run "$name" 2 verify t.json --key key.pub.pem m/safe.pkl && pass "$name"
done

name="a bundle over Limits::max_bundle_bytes is refused unread (exit 2)"
truncate -s 65M huge.json
if run "$name" 2 verify huge.json --key key.pub.pem m/safe.pkl; then
  contains err.txt "max_bundle_bytes" && pass "$name" || fail "$name" "$(cat err.txt)"
fi

name="a single file argument is attested under its own name"
if run "$name" 0 "$bin" scan --attest one.json --key key.pem m/safe.pkl &&
   run "$name" 0 verify one.json --key key.pub.pem m/safe.pkl; then
  contains out.txt "SAFE as safe.pkl" && pass "$name" || fail "$name" "$(cat out.txt)"
fi

# Independent check: python's stdlib, sha256sum and the openssl CLI, none of them ckptscan.
name="openssl and plain JSON accept the bundle"
python3 - <<'PY' >check.txt 2>&1
import base64, hashlib, json, re, subprocess
b = json.load(open("a.json"))
assert b["mediaType"] == "application/vnd.dev.sigstore.bundle.v0.3+json", b["mediaType"]
env = b["dsseEnvelope"]
assert env["payloadType"] == "application/vnd.in-toto+json"
payload = base64.b64decode(env["payload"], validate=True)
open("payload.json", "wb").write(payload)
open("sig.der", "wb").write(base64.b64decode(env["signatures"][0]["sig"], validate=True))
pem = open("key.pub.pem", "rb").read()
assert b["verificationMaterial"]["publicKey"]["hint"] == hashlib.sha256(pem).hexdigest()
s = json.loads(payload)
assert s["_type"] == "https://in-toto.io/Statement/v1"
assert s["predicateType"] == "https://in-toto.io/attestation/svr/v0.1"
p = s["predicate"]
assert p["verifier"]["id"].startswith("https://github.com/ckptscan/ckptscan/releases/tag/v")
assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", p["timeCreated"]), p["timeCreated"]
assert p["properties"] == [], p["properties"]  # one SUSPICIOUS and one ERROR file
names = [x["name"] for x in s["subject"]]
assert names == sorted(["broken.pkl", "odd.pkl", "safe.pkl"]), names
assert [f["name"] for f in p["ckptscanFiles"]] == names
for subj, f in zip(s["subject"], p["ckptscanFiles"]):
    want = hashlib.sha256(open("m/" + subj["name"], "rb").read()).hexdigest()
    assert subj["digest"] == {"sha256": want}, subj
    assert f["complete"] == (f["verdict"] != "ERROR"), f
print("json ok")
PY
{
  printf 'DSSEv1 %d %s %d ' 28 'application/vnd.in-toto+json' "$(wc -c < payload.json)"
  cat payload.json
} > pae.bin
if ! contains check.txt "json ok"; then fail "$name" "$(cat check.txt)"
elif ! openssl dgst -sha256 -verify key.pub.pem -signature sig.der pae.bin | grep -qx 'Verified OK'; then
  fail "$name" "openssl does not verify the signature"
else
  for f in m/safe.pkl m/odd.pkl m/broken.pkl; do
    grep -q "$(sha256sum "$f" | cut -d' ' -f1)" payload.json || fail "$name" "no digest of $f"
  done
  pass "$name"
fi

name="openssl refuses the signature over a changed payload"
sed 's/"SAFE"/"SAFF"/' payload.json > payload2.json
{
  printf 'DSSEv1 %d %s %d ' 28 'application/vnd.in-toto+json' "$(wc -c < payload2.json)"
  cat payload2.json
} > pae2.bin
if openssl dgst -sha256 -verify key.pub.pem -signature sig.der pae2.bin >/dev/null 2>&1; then
  fail "$name" "verified"
else
  pass "$name"
fi

finish
