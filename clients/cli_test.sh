#!/usr/bin/env bash
# End-to-end checks of the built ckptscan binary on tiny pickles made with printf.
#   clients/cli_test.sh path/to/ckptscan [path/to/without_seccomp]
# Each case names the scenario it proves; the script fails if any case fails.
set -uo pipefail

bin="${1:?usage: cli_test.sh path/to/ckptscan [path/to/without_seccomp]}"
without_seccomp="${2:-}"
bin="$(realpath "$bin")"
[[ -z "$without_seccomp" ]] || without_seccomp="$(realpath "$without_seccomp")"
py=/usr/bin/python3
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/test_lib.sh"
enter_tmp

printf '\x80\x02}q\x00.' >safe.pkl                      # {} (protocol 2)
printf "cposix\nsystem\n(S'id'\ntR." >evil.pkl           # posix.system('id')
printf '\x80\x02}q\x00' >truncated.pkl                  # no STOP
: >empty.pkl
: >empty.txt
printf 'not a pickle' | gzip >model.pt.gz
mkdir -p dir/sub && cp safe.pkl dir/a.pkl && cp evil.pkl dir/sub/b.pkl
ln -s "$tmp/dir/sub" dir/linked

name=SafePickleExitsZeroAndSaysSafe
if run "$name" 0 "$bin" scan safe.pkl; then
  contains out.txt "safe.pkl: SAFE" && pass "$name" || fail "$name" "no SAFE line: $(cat out.txt)"
fi

name=ShellCallIsDangerousInJsonAndExitsOne
if run "$name" 1 "$bin" scan --format json evil.pkl; then
  if "$py" -c '
import json, sys
r = json.load(open("out.txt"))
assert r["schema"] == "ckptscan.report.v1", r["schema"]
assert r["verdict"] == "DANGEROUS", r["verdict"]
f = r["files"][0]
assert f["verdict"] == "DANGEROUS" and f["format"] == "pickle"
assert any(x["global"] == "posix.system" for x in f["findings"]), f["findings"]
assert isinstance(f["size"], int) and f["size"] == 24
assert f["sha256"] == "", "no digest unless asked: " + f["sha256"]
'; then pass "$name"; else fail "$name" "unexpected JSON: $(cat out.txt)"; fi
fi

name=TruncatedPickleIsErrorExitTwo
if run "$name" 2 "$bin" scan truncated.pkl; then
  contains out.txt "ERROR" && pass "$name" || fail "$name" "no ERROR: $(cat out.txt)"
fi

# An empty file holds nothing any loader could run (pickle.load raises EOFError on it): data
# of format "empty", SAFE whatever its name, and the report says what it is.
name=EmptyFileIsEmptyData
if run "$name" 0 "$bin" scan --format json empty.txt; then
  "$py" -c 'import json; f = json.load(open("out.txt"))["files"][0]; assert (f["format"], f["kind"], f["verdict"]) == ("empty", "data", "SAFE"), f' \
    && pass "$name" || fail "$name" "$(cat out.txt)"
fi

# Under a name loaders read weights from, an empty file means the weights are missing.
name=EmptyWeightsFileIsNotPresent
if run "$name" 2 "$bin" scan --format json empty.pkl; then
  "$py" -c 'import json; f = json.load(open("out.txt"))["files"][0]; assert (f["format"], f["verdict"], [e["code"] for e in f["errors"]]) == ("empty", "ERROR", ["not_present"]), f' \
    && pass "$name" || fail "$name" "$(cat out.txt)"
fi

# joblib.load decompresses a gzip file and unpickles "not a pickle": ERROR, whatever the name.
name=GzipOfNoPickleIsErrorNotSafeWhateverTheName
if run "$name" 2 "$bin" scan --format json model.pt.gz; then
  "$py" -c 'import json; f = json.load(open("out.txt"))["files"][0]; assert f["format"] == "gzip" and f["verdict"] == "ERROR", f' \
    && pass "$name" || fail "$name" "$(cat out.txt)"
fi

name=MissingPathIsAnErrorEntryNotACrash
if run "$name" 2 "$bin" scan --format json does-not-exist.pkl safe.pkl; then
  "$py" -c '
import json
r = json.load(open("out.txt"))
assert [f["path"] for f in r["files"]] == ["does-not-exist.pkl", "safe.pkl"], r
assert r["files"][0]["verdict"] == "ERROR" and r["files"][0]["errors"][0]["code"] == "io"
assert r["verdict"] == "ERROR"
' && pass "$name" || fail "$name" "$(cat out.txt)"
fi

name=BadFlagIsUsageError64
run "$name" 64 "$bin" scan --no-such-flag safe.pkl && pass "$name"

name=NoPathIsUsageError64
run "$name" 64 "$bin" scan && pass "$name"

name=NoCommandIsUsageError64
run "$name" 64 "$bin" && pass "$name"

name=UnknownLimitIsUsageError64
if run "$name" 64 "$bin" scan --limit max_bogus=1 safe.pkl; then
  contains err.txt "unknown limit" && pass "$name" || fail "$name" "$(cat err.txt)"
fi

name=LimitFlagIsAppliedAndNamedInTheError
if run "$name" 2 "$bin" scan --format json --limit max_opcodes=1 safe.pkl; then
  "$py" -c '
import json
e = json.load(open("out.txt"))["files"][0]["errors"][0]
assert e["code"] == "limit" and e["limit_name"] == "max_opcodes" and e["limit_value"] == 1, e
' && pass "$name" || fail "$name" "$(cat out.txt)"
fi

# A worker's format limit is a --limit name: an .npz member of zeros deflated near DEFLATE's
# maximum (~1000:1) is SAFE by default (numpy reads it), ERROR naming max_compression_ratio once
# --limit lowers it to 100, and SAFE again at the value such an error suggests raising it to.
"$py" -c '
import numpy
numpy.savez_compressed("zeros.npz", a=numpy.zeros(100000))
'
name=FormatLimitDefaultAdmitsWhatDeflateCanReach
if run "$name" 0 "$bin" scan zeros.npz; then
  contains out.txt "zeros.npz: SAFE" && pass "$name" || fail "$name" "$(cat out.txt)"
fi
name=FormatLimitIsNamedInTheError
if run "$name" 2 "$bin" scan --limit max_compression_ratio=100 zeros.npz; then
  contains out.txt "[limit max_compression_ratio=100]" && pass "$name" || fail "$name" "$(cat out.txt)"
fi
name=FormatLimitFlagReachesTheWorker
if run "$name" 0 "$bin" scan --limit max_compression_ratio=10K zeros.npz; then
  contains out.txt "zeros.npz: SAFE" && pass "$name" || fail "$name" "$(cat out.txt)"
fi
name=FormatLimitOverItsMaximumIsUsageError64
if run "$name" 64 "$bin" scan --limit max_container_depth=4G zeros.npz; then
  contains err.txt "at most 4294967295" && pass "$name" || fail "$name" "$(cat err.txt)"
fi

name=SarifOutputIsValidJson
if run "$name" 1 "$bin" scan --format sarif evil.pkl truncated.pkl; then
  if "$py" -m json.tool out.txt >/dev/null && "$py" -c '
import json
s = json.load(open("out.txt"))
assert s["version"] == "2.1.0" and len(s["runs"]) == 1
run = s["runs"][0]
ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
assert ids == sorted(set(ids)) and "scan.error" in ids, ids
assert {r["ruleId"] for r in run["results"]} <= set(ids)
assert all(len(r["partialFingerprints"]["ckptscanFinding/v1"]) == 64 for r in run["results"])
'; then pass "$name"; else fail "$name" "$(head -c 2000 out.txt)"; fi
fi

name=FolderScanIsRecursiveSortedAndWalksEachFolderOnce
if run "$name" 1 "$bin" scan dir; then
  if contains out.txt "skipped: dir/linked (symlink to a folder walked as dir/sub (each folder once))" &&
     [[ "$(grep -c ': SAFE\|: DANGEROUS' out.txt)" == 2 ]] &&
     [[ "$(grep -n 'dir/a.pkl' out.txt | cut -d: -f1)" -lt "$(grep -n 'dir/sub/b.pkl' out.txt | cut -d: -f1)" ]]; then
    pass "$name"
  else
    fail "$name" "$(cat out.txt)"
  fi
fi

name=SameInputGivesSameBytes
"$bin" scan --format json dir safe.pkl >a.json 2>/dev/null
"$bin" scan --format json dir safe.pkl >b.json 2>/dev/null
"$bin" scan --format sarif dir safe.pkl >a.sarif 2>/dev/null
"$bin" scan --format sarif dir safe.pkl >b.sarif 2>/dev/null
cmp -s a.json b.json && cmp -s a.sarif b.sarif && pass "$name" || fail "$name" "outputs differ"

name=OutputFlagWritesTheReportToAFile
if run "$name" 0 "$bin" scan --format json --output report.json safe.pkl; then
  [[ ! -s out.txt ]] && "$py" -m json.tool report.json >/dev/null && pass "$name" \
    || fail "$name" "stdout not empty or report.json invalid"
fi

name=DisasmListsOpcodesAndExitsAsScan
if run "$name" 1 "$bin" disasm evil.pkl; then
  contains out.txt "GLOBAL" && contains out.txt "REDUCE" && contains out.txt "DANGEROUS" \
    && pass "$name" || fail "$name" "$(cat out.txt)"
fi

name=DisasmOfTruncatedPickleExitsTwo
run "$name" 2 "$bin" disasm truncated.pkl && pass "$name"

name=DisasmInTheJailPrintsExactlyWhatTheInProcessDisasmPrints
same=1
for f in evil.pkl safe.pkl truncated.pkl empty.pkl model.pt.gz; do
  "$bin" disasm "$f" >jailed.txt 2>/dev/null
  jrc=$?
  "$bin" disasm --no-sandbox "$f" >inproc.txt 2>/dev/null
  nrc=$?
  if [[ $jrc -ne $nrc ]] || ! cmp -s jailed.txt inproc.txt; then
    fail "$name" "$f: exit $jrc vs $nrc; $(diff jailed.txt inproc.txt | head -5)"
    same=0
  fi
done
[[ $same -eq 1 ]] && pass "$name"

name=NoSandboxWarnsOnStderrAndGivesTheSameVerdict
if run "$name" 1 "$bin" scan --no-sandbox evil.pkl; then
  contains err.txt "warning: --no-sandbox" && contains out.txt "DANGEROUS" \
    && pass "$name" || fail "$name" "stderr: $(cat err.txt)"
fi

name=JailedScanPrintsNoWarning
if run "$name" 0 "$bin" scan safe.pkl; then
  [[ ! -s err.txt ]] && pass "$name" || fail "$name" "stderr: $(cat err.txt)"
fi

# CKPTSCAN_SERVER is --server's default: set, the scan goes to that daemon (none here: an ERROR
# entry naming it, exit 2); empty, the embedded jail scans; with a flag that only means
# something locally, a usage error that names the variable.
name=ServerComesFromCkptscanServer
if run "$name" 2 env CKPTSCAN_SERVER=./no-daemon.sock "$bin" scan safe.pkl; then
  contains out.txt "ckptscand at unix:./no-daemon.sock" && pass "$name" || fail "$name" "$(cat out.txt)"
fi
name=EmptyCkptscanServerMeansTheEmbeddedJail
run "$name" 0 env CKPTSCAN_SERVER= "$bin" scan safe.pkl && pass "$name"
name=CkptscanServerWithNoSandboxIsUsage64NamingIt
if run "$name" 64 env CKPTSCAN_SERVER=./no-daemon.sock "$bin" scan --no-sandbox safe.pkl; then
  contains err.txt "from CKPTSCAN_SERVER" && pass "$name" || fail "$name" "$(cat err.txt)"
fi

name=BadSandboxFlagsAreUsageErrors
ok=1
for args in "--timeout 0" "--timeout abc" "--timeout -1" "--worker-memory 8x" "--worker-memory 0" \
            "--max-frame-bytes 0" "--max-frame-bytes 65M" "--max-frame-values 0" \
            "--max-frame-values 8000001"; do
  # shellcheck disable=SC2086
  run "$name" 64 "$bin" scan $args safe.pkl || ok=0
done
[[ $ok -eq 1 ]] && pass "$name"

# The trusted side's caps on a worker's result are flags as their messages name them.
name=MaxFrameValuesUnderTheFactsIsErrorNamingItsFlag
if run "$name" 2 "$bin" scan --max-frame-values 1 evil.pkl; then
  contains out.txt "evil.pkl: ERROR" && contains out.txt "[limit max_frame_values=1]" \
    && pass "$name" || fail "$name" "$(cat out.txt)"
fi
name=MaxFrameBytesUnderTheFrameIsErrorNamingItsFlag
if run "$name" 2 "$bin" scan --max-frame-bytes 16 safe.pkl; then
  contains out.txt "safe.pkl: ERROR" && contains out.txt "[limit max_frame_bytes=16]" \
    && pass "$name" || fail "$name" "$(cat out.txt)"
fi
name=FrameFlagsWithServerAreUsage64
if run "$name" 64 "$bin" scan --server ./no-daemon.sock --max-frame-values 5 safe.pkl; then
  contains err.txt "--max-frame-values" && pass "$name" || fail "$name" "$(cat err.txt)"
fi

name=MissingWorkerRefusesToScanWithExitTwo
if run "$name" 2 "$bin" scan --worker /nonexistent/ckptscan-worker safe.pkl; then
  contains err.txt "missing or not executable" && [[ ! -s out.txt ]] \
    && pass "$name" || fail "$name" "stderr: $(cat err.txt)"
fi

name=WorkerFlagNamesTheWorkerToRun
if run "$name" 0 "$bin" scan --worker "$(dirname "$bin")/ckptscan-worker" safe.pkl; then
  pass "$name"
fi

if [[ -n "$without_seccomp" ]]; then
  name=WithoutSeccompScanIsRefusedWithExitTwo
  if run "$name" 2 "$without_seccomp" "$bin" scan safe.pkl; then
    contains err.txt "refusing to scan: seccomp is not available" && [[ ! -s out.txt ]] \
      && pass "$name" || fail "$name" "stderr: $(cat err.txt)"
  fi
  name=WithoutSeccompDisasmIsRefusedToo
  run "$name" 2 "$without_seccomp" "$bin" disasm evil.pkl && pass "$name"
  name=WithoutSeccompNoSandboxStillScans
  if run "$name" 1 "$without_seccomp" "$bin" scan --no-sandbox evil.pkl; then
    contains out.txt "DANGEROUS" && pass "$name" || fail "$name" "$(cat out.txt)"
  fi
fi

name=HelpTellsExitCodesFormatsAndLimits
if run "$name" 0 "$bin" scan --help; then
  contains out.txt "Exit codes" && contains out.txt "sarif" && contains out.txt "max_opcodes" \
    && contains out.txt "64" && contains out.txt "--no-sandbox" && contains out.txt "--timeout" \
    && contains out.txt "--worker-memory" && contains out.txt "--worker" \
    && pass "$name" || fail "$name" "$(cat out.txt)"
fi

# Each command's --help gives its own exit codes, not scan's verdict codes.
for cmd in keygen "rules show" "rules check" version; do
  name="HelpOf ${cmd}: its own exit codes"
  # shellcheck disable=SC2086  # "rules show" is two words
  if run "$name" 0 "$bin" $cmd --help; then
    if contains out.txt "worst verdict"; then fail "$name" "scan's exit codes: $(cat out.txt)"
    elif ! contains out.txt "Exit code"; then fail "$name" "no exit codes: $(cat out.txt)"
    else pass "$name"; fi
  fi
done

name=RulesShowPrintsARulesFileThatChecksOk
if run "$name" 0 "$bin" rules show; then
  cp out.txt shown.textproto
  run "$name" 0 "$bin" rules check shown.textproto && pass "$name"
fi

name=RulesCheckOfABrokenFileIsUsageError64
printf 'this is { not a rule set' >broken.textproto
run "$name" 64 "$bin" rules check broken.textproto && pass "$name"

name=DigestNoneLeavesTheSha256EmptyAndTheVerdictUnchanged
if run "$name" 0 "$bin" scan --format json --digest none safe.pkl; then
  contains out.txt '"sha256": ""' && contains out.txt '"verdict": "SAFE"' \
    && pass "$name" || fail "$name" "$(cat out.txt)"
fi

# The digest costs a read of the whole file: only when asked (or when --manifest compares it).
name=DigestIsTheFilesSha256WhenAsked
if run "$name" 0 "$bin" scan --format json --digest sha256 safe.pkl; then
  want=$(sha256sum safe.pkl | cut -d' ' -f1)
  contains out.txt "\"sha256\": \"$want\"" && pass "$name" || fail "$name" "$(cat out.txt)"
fi
name=NoDigestByDefault
if run "$name" 0 "$bin" scan --format json safe.pkl; then
  contains out.txt '"sha256": ""' && pass "$name" || fail "$name" "$(cat out.txt)"
fi

name=VersionPrintsTheScannerVersion
if run "$name" 0 "$bin" version; then
  contains out.txt "ckptscan " && pass "$name" || fail "$name" "$(cat out.txt)"
fi

# --quiet: a text report leaves the SAFE files out, the summary still counts them; no progress.
name=QuietListsOnlyWhatIsNotSafe
if run "$name" 1 "$bin" scan -q dir; then
  if ! grep -q "a.pkl" out.txt && contains out.txt "b.pkl: DANGEROUS" &&
     contains out.txt "2 files: 1 SAFE, 0 SUSPICIOUS, 1 DANGEROUS"; then
    pass "$name"
  else
    fail "$name" "$(cat out.txt)"
  fi
fi
# --verbose: the settings, then a line per file with its verdict and time, on stderr.
name=VerbosePrintsEachFileOnStderr
if run "$name" 1 "$bin" scan -v -j 1 dir; then
  if contains err.txt "digest none" && contains err.txt "a.pkl: SAFE in " &&
     contains err.txt "b.pkl: DANGEROUS in "; then
    pass "$name"
  else
    fail "$name" "$(cat err.txt)"
  fi
fi
run "quiet and verbose" 64 "$bin" scan -q -v safe.pkl && pass "--quiet with --verbose is a usage error"
# Progress: only on a terminal. A 600 MiB sparse file hashed (--digest sha256) takes long enough
# for a progress line; with stderr a file there is none, on a pseudo-terminal (script(1)) there is.
truncate -s 600M big.bin
name=NoProgressWhenStderrIsNotATerminal
if run "$name" 2 "$bin" scan --digest sha256 big.bin; then
  if grep -q $'\r' err.txt; then fail "$name" "progress in a file: $(od -c err.txt | head -3)"
  else pass "$name"; fi
fi
name=ProgressOnATerminalThenErased
if command -v script >/dev/null; then
  script -qec "$bin scan --digest sha256 big.bin" /dev/null >tty.txt 2>&1
  if grep -q "scan: 0/1 file, .* of 600.0 MiB read" tty.txt && grep -q $'\r\033\[K' tty.txt &&
     contains tty.txt "big.bin: ERROR"; then
    pass "$name"
  else
    fail "$name" "$(od -c tty.txt | head -8)"
  fi
else
  echo "skip $name: script(1) is not installed (bsdutils)"
fi
rm -f big.bin

# A finding's hint is a command line: run as printed, with the file after it, it must clear the
# finding. `--allow NAME FILE` once took FILE for a second name (exit 64, "give PATH").
printf "cmymodule\nMyClass\n)R." >unlisted.pkl
name=AllowHintRunAsPrintedClearsTheFinding
if run "$name" 1 "$bin" scan unlisted.pkl; then
  hint="$(grep -o -- '--allow [A-Za-z0-9_.:]*' out.txt | head -1)"
  if [[ "$hint" != "--allow mymodule.MyClass" ]]; then
    fail "$name" "no --allow hint: $(cat out.txt)"
  else
    ok=1
    # shellcheck disable=SC2086  # the hint is two words, as a user pastes it
    # The same hint twice (two findings print it, the user pastes both) is one entry, not a
    # usage error.
    for line in "$hint unlisted.pkl" "${hint/ /=} unlisted.pkl" "$hint --allow other.Name unlisted.pkl safe.pkl" "$hint $hint unlisted.pkl"; do
      "$bin" scan $line >out.txt 2>err.txt
      rc=$?
      if [[ $rc != 0 ]]; then
        ok=0; fail "$name" "scan $line: exit $rc: $(cat out.txt err.txt)"; break
      fi
      if ! grep -q "unlisted.pkl: SAFE" out.txt; then
        ok=0; fail "$name" "scan $line: $(cat out.txt)"; break
      fi
    done
    [[ $ok == 1 ]] && pass "$name"
  fi
fi

# Every repeatable option takes one value per occurrence: --limit and --exclude before the
# paths leave the paths alone.
name=RepeatableOptionsLeaveThePathsAlone
mkdir -p tree && cp safe.pkl tree/a.pkl && cp evil.pkl tree/skip.pkl
if run "$name" 0 "$bin" scan --limit max_opcodes=1000 --exclude skip.pkl tree safe.pkl; then
  contains out.txt "2 files" && pass "$name" || fail "$name" "$(cat out.txt)"
fi

# An overlay file's entry naming only the global clears what --allow clears, and `rules check`
# validates an overlay (no version) by merging it as --rules-overlay does.
printf 'allow { module: "mymodule" name: "MyClass" }\n' >site.textproto
printf 'allow { module: "posix" name: "system" }\n' >bad_site.textproto
name=OverlayAllowEntryClearsWhatAllowClears
if run "$name" 0 "$bin" scan --rules-overlay site.textproto unlisted.pkl; then
  contains out.txt "unlisted.pkl: SAFE" && pass "$name" || fail "$name" "$(cat out.txt)"
fi
name=RulesCheckValidatesAnOverlay
if run "$name" 0 "$bin" rules check site.textproto; then
  if contains out.txt "ok as an overlay" && ! "$bin" rules check bad_site.textproto >out.txt 2>&1 &&
     contains out.txt "DANGEROUS"; then
    pass "$name"
  else
    fail "$name" "$(cat out.txt)"
  fi
fi

finish
