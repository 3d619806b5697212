#!/usr/bin/env bash
# Validates `ckptscan scan --format sarif` against the official SARIF 2.1.0 JSON schema
# (tests/fixtures/sarif/, from oasis-tcs/sarif-spec) with Debian's python3-jsonschema, and checks
# what GitHub code scanning needs beyond the schema (rule metadata and help, region.startLine,
# stable partialFingerprints, security-severity).
#   clients/sarif_schema_test.sh path/to/ckptscan path/to/tests/fixtures
set -uo pipefail

bin="${1:?usage: sarif_schema_test.sh path/to/ckptscan path/to/tests/fixtures}"
fixtures="${2:?usage: sarif_schema_test.sh path/to/ckptscan path/to/tests/fixtures}"
bin="$(realpath "$bin")"
fixtures="$(realpath "$fixtures")"
py=/usr/bin/python3
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
schema="$fixtures/sarif/sarif-schema-2.1.0.json"
source "$here/test_lib.sh"
enter_tmp

if ! "$py" -c 'import jsonschema' 2>/dev/null; then
  echo "python3-jsonschema is missing: run scripts/setup.sh"
  exit 1
fi

cat >check_sarif.py <<'PY'
import json, sys
import jsonschema

schema = json.load(open(sys.argv[1]))
doc = json.load(open(sys.argv[2]))
cls = jsonschema.validators.validator_for(schema)
cls.check_schema(schema)
errors = sorted(cls(schema, format_checker=cls.FORMAT_CHECKER).iter_errors(doc), key=str)
for e in errors[:5]:
    print("schema:", "/".join(map(str, e.absolute_path)), e.message)
assert not errors, f"{len(errors)} schema errors"

# What GitHub code scanning reads beyond the schema.
assert doc["version"] == "2.1.0" and len(doc["runs"]) == 1
run = doc["runs"][0]
driver = run["tool"]["driver"]
assert driver["name"] == "ckptscan" and driver.get("version"), driver
rules = driver["rules"]
ids = [r["id"] for r in rules]
assert len(ids) == len(set(ids)), ids
for r in rules:
    assert r["shortDescription"]["text"] and r["fullDescription"]["text"], r
    assert r["help"]["text"], r
    assert r["defaultConfiguration"]["level"] in ("error", "warning", "note"), r
    sev = r["properties"].get("security-severity")
    if sev is not None:
        assert 0.0 <= float(sev) <= 10.0, r
seen = set()
for res in run["results"]:
    assert res["ruleId"] in ids and ids[res["ruleIndex"]] == res["ruleId"], res
    assert res["level"] in ("error", "warning", "note"), res
    assert res["message"]["text"], res
    (loc,) = res["locations"]
    phys = loc["physicalLocation"]
    assert phys["artifactLocation"]["uri"], res
    assert phys["region"]["startLine"] >= 1, res
    fp = res["partialFingerprints"]["ckptscanFinding/v1"]
    assert len(fp) == 64 and all(c in "0123456789abcdef" for c in fp), res
    # byte offset and member are in the description and the properties
    if "code" not in res["properties"]:  # a finding: where it is, in words
        assert " at byte " in res["message"]["text"], res
    assert isinstance(res["properties"]["offset"], int), res
    seen.add(res["ruleId"])
want = sys.argv[3].split(",") if len(sys.argv) > 3 and sys.argv[3] else []
for w in want:
    assert w in seen, (w, sorted(seen))
print(f"ok: {len(run['results'])} results, {len(rules)} rules")
PY

printf '\x80\x02}q\x00.' >safe.pkl
printf "cposix\nsystem\n(S'id'\ntR." >evil.pkl
printf '\x80\x02}q\x00' >truncated.pkl
printf "cposix\nsystem\n(S'id'\ntR." >'sp ace%&#?é.pkl'
printf "cposix\nsystem\n(S'id'\ntR." >"$(printf 'bad\xffname.pkl')"
mkdir -p sums && cp safe.pkl sums/                  # a folder holding only what SUMS lists
(cd sums && sha256sum safe.pkl | sed 's/^./0/' >SUMS)  # a digest that does not match

check() {  # check NAME EXPECTED_RC WANTED_RULES ARGS...
  local name="$1" rc="$2" want="$3"
  shift 3
  if run "$name" "$rc" "$bin" scan --format sarif "$@"; then
    if out="$("$py" check_sarif.py "$schema" out.txt "$want" 2>&1)"; then
      pass "$name ($out)"
    else
      fail "$name" "$out"
    fi
  fi
}

check SafeFileGivesAValidEmptyRun 0 "" safe.pkl
check DangerousAndErrorResultsAreValid 1 "global.denied.shell,scan.error" evil.pkl truncated.pkl
check OddFileNamesAreEncodedAsValidUris 1 "global.denied.shell" 'sp ace%&#?é.pkl' "$(printf 'bad\xffname.pkl')" "$PWD/evil.pkl"
check MissingFileIsAValidErrorResult 2 "scan.error" does-not-exist.pkl
check DigestMismatchHasItsOwnRule 2 "manifest.digest_mismatch" --manifest sums/SUMS
check MaliciousPickleFixturesAreValid 1 "" "$fixtures/pickles/malicious"
check ContainerFixturesAreValid 1 "" "$fixtures/containers"
check TorchFixturesAreValid 1 "" "$fixtures/torch"

name=FingerprintsAreStableAcrossRuns
"$bin" scan --format sarif "$fixtures/pickles/malicious" >a.sarif 2>/dev/null
"$bin" scan --format sarif "$fixtures/pickles/malicious" >b.sarif 2>/dev/null
cmp -s a.sarif b.sarif && pass "$name" || fail "$name" "outputs differ"

finish
