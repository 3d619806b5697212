#!/usr/bin/env bash
# `cmake --install` into a fresh prefix lays out what cmake/install.cmake promises, and the
# installed binaries work from there with the installed worker.
#   install_layout_test.sh CMAKE BUILD_DIR SOURCE_DIR
# Proves: bin/{ckptscan,ckptscand,ckptscan-worker} side by side and executable; the rules file,
# the systemd unit (its paths rewritten to the prefix, --config, reload through `ckptscan admin
# reload-rules`), the docs, man pages and bash/zsh completions made from --help, the copyright
# file and etc/ckptscan/ckptscand.conf (kept when installing again) in place; the installed
# `ckptscan scan` gives SAFE / DANGEROUS on fixtures with the installed rules file, and fails
# (exit 2, worker missing) once the installed worker is moved away, so the worker it used was
# the installed one; the installed ckptscand starts (its start-up job runs the installed worker)
# and logs `listening`.
set -uo pipefail
cmake="$1"
build="$(realpath "$2")"
src="$(realpath "$3")"
fixtures="$src/tests/fixtures"
tmp="$(mktemp -d)"
dpid=
trap '[[ -n "$dpid" ]] && kill -9 "$dpid" 2>/dev/null; rm -rf "$tmp"' EXIT
prefix="$tmp/usr"  # no space: systemd units cannot name such paths unquoted (moved below)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

if ! "$cmake" --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1; then
  cat "$tmp/install.log"
  echo "FAIL: cmake --install $build --prefix $prefix"
  exit 1
fi
pass "cmake --install --prefix '$prefix' ($(grep -c 'Installing:' "$tmp/install.log") files)"

# The layout.
for f in bin/ckptscan bin/ckptscand bin/ckptscan-worker; do
  [[ -f "$prefix/$f" && -x "$prefix/$f" ]] && pass "$f executable" || fail "$f missing or not executable"
done
for f in share/ckptscan/rules/default_rules.textproto lib/systemd/system/ckptscand.service \
         share/doc/ckptscan/README.md share/doc/ckptscan/daemon.md share/doc/ckptscan/cli.md \
         share/doc/ckptscan/operations.md share/doc/ckptscan/sandbox.md; do
  [[ -f "$prefix/$f" ]] && pass "$f" || fail "$f missing"
done
# Man pages, completions, the copyright file and the daemon's config (P/etc for a prefix
# other than /usr).
for f in share/man/man1/ckptscan.1.gz share/man/man8/ckptscand.8.gz \
         share/bash-completion/completions/ckptscan share/bash-completion/completions/ckptscand \
         share/zsh/vendor-completions/_ckptscan share/zsh/vendor-completions/_ckptscand \
         share/doc/ckptscan/copyright etc/ckptscan/ckptscand.conf; do
  [[ -s "$prefix/$f" ]] && pass "$f" || fail "$f missing or empty"
done
# Made from --help: a flag added this year is in the page and completes.
if command -v man >/dev/null; then
  MANWIDTH=200 man -l "$prefix/share/man/man1/ckptscan.1.gz" 2>/dev/null | grep -q -- "--max-frame-values" &&
    pass "man -l ckptscan.1.gz renders, with scan's --max-frame-values" ||
    fail "ckptscan.1.gz does not render or lacks --max-frame-values"
else
  echo "note: man(1) is not installed: the pages' rendering is not checked here"
fi
completes() {  # WORDS... -> the completions of the last word, one line
  bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1));
           _ckptscan; echo "${COMPREPLY[*]}"' _ "$prefix/share/bash-completion/completions/ckptscan" "$@"
}
[[ "$(completes ckptscan sc)" == "scan" ]] && pass "bash: ckptscan sc<TAB> -> scan" ||
  fail "bash: ckptscan sc<TAB> -> '$(completes ckptscan sc)'"
[[ " $(completes ckptscan convert --max-o) " == *" --max-output-bytes "* ]] &&
  pass "bash: convert --max-o<TAB> -> --max-output-bytes" ||
  fail "bash: convert --max-o<TAB> -> '$(completes ckptscan convert --max-o)'"
[[ "$(completes ckptscan scan --format "")" == "text json sarif junit" ]] &&
  pass "bash: scan --format <TAB> -> its four values" ||
  fail "bash: scan --format <TAB> -> '$(completes ckptscan scan --format "")'"
# zsh: the function's syntax, and what it offers (compadd and _files stood in for).
if command -v zsh >/dev/null; then
  zfn="$prefix/share/zsh/vendor-completions/_ckptscan"
  offered=$(zsh -c 'compadd() { shift; print -r -- "$@"; }; _files() { print -r -- "<files>"; }
                    words=(ckptscan scan --format ""); CURRENT=4; PREFIX=; source "$1"' _ "$zfn" 2>&1)
  zsh -n "$zfn" && [[ "$offered" == "text json sarif junit" ]] &&
    pass "zsh: scan --format <TAB> -> its four values" || fail "zsh: '$offered'"
else
  echo "note: zsh is not installed: the zsh completion is not run here"
fi
# A site's edited config survives a second install.
echo "# edited by the site" >>"$prefix/etc/ckptscan/ckptscand.conf"
"$cmake" --install "$build" --prefix "$prefix" >"$tmp/install2.log" 2>&1 || fail "second install failed"
grep -q "edited by the site" "$prefix/etc/ckptscan/ckptscand.conf" &&
  pass "a second install keeps the edited ckptscand.conf" || fail "a second install replaced the config"

cmp -s "$src/rules/default_rules.textproto" "$prefix/share/ckptscan/rules/default_rules.textproto" ||
  fail "the installed rules differ from rules/default_rules.textproto"
ndocs=$(ls "$src"/docs/*.md | wc -l)
ninst=$(ls "$prefix"/share/doc/ckptscan/*.md | wc -l)
[[ $ninst -eq $((ndocs + 1)) ]] && pass "$ninst docs installed" ||
  fail "docs: $ninst installed, want docs/*.md ($ndocs) + README.md"
# Nothing else in bin/: no test binaries, no probes.
extra=$(ls "$prefix/bin" | grep -vxE 'ckptscan|ckptscand|ckptscan-worker' || true)
[[ -z "$extra" ]] && pass "bin/ holds the three binaries only" || fail "unexpected in bin/: $extra"

# The unit: ExecStart and Documentation point into the prefix; no /usr/local left.
unit="$prefix/lib/systemd/system/ckptscand.service"
if [[ -f "$unit" ]]; then
  grep -q "^ExecStart=$prefix/bin/ckptscand --config $prefix/etc/ckptscan/ckptscand.conf\$" "$unit" &&
    pass "unit ExecStart is $prefix/bin/ckptscand --config $prefix/etc/ckptscan/ckptscand.conf" ||
    fail "unit ExecStart: $(grep ExecStart= "$unit")"
  grep -q "^ExecReload=$prefix/bin/ckptscan admin reload-rules --server unix:" "$unit" &&
    pass "unit ExecReload is the daemon's own reload call" ||
    fail "unit ExecReload: $(grep ExecReload= "$unit")"
  grep -q "/bin/kill\|/srv/models" <(grep -v "^#" "$unit") &&
    fail "unit needs /bin/kill or names a root: $(grep -v '^#' "$unit" | grep -n '/bin/kill\|/srv/models')"
  grep -q "^Documentation=file://$prefix/share/doc/ckptscan/daemon.md" "$unit" &&
    pass "unit Documentation points at the installed daemon.md" ||
    fail "unit Documentation: $(grep Documentation= "$unit")"
  grep -q "/usr/local" "$unit" && fail "unit still names /usr/local: $(grep -n /usr/local "$unit")"
  [[ -f "$prefix/$(grep '^Documentation=file://' "$unit" | sed "s#^Documentation=file://$prefix/##")" ]] ||
    fail "the unit's Documentation file does not exist"
  if command -v systemd-analyze >/dev/null; then
    # Verifies syntax only; the unit's user need not exist here.
    systemd-analyze verify "$unit" >"$tmp/verify.log" 2>&1 || true
    grep -iE "unknown (key|section)|invalid|failed to parse" "$tmp/verify.log" &&
      fail "systemd-analyze verify complains about the unit"
  else
    echo "note: systemd-analyze not installed; the unit's syntax is not verified here"
  fi
fi

# The installed CLI, from the prefix, on fixtures, with the installed rules.
bin="$prefix/bin/ckptscan"
rules="$prefix/share/ckptscan/rules/default_rules.textproto"
scan() {  # scan WANT_EXIT WANT_VERDICT FILE [FLAGS...]
  local want_exit="$1" want="$2" file="$3"
  shift 3
  (cd "$tmp" && "$bin" scan -f json "$@" "$file") >"$tmp/r.json" 2>"$tmp/r.err"
  local rc=$? got
  got=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["verdict"])' \
        "$tmp/r.json" 2>/dev/null || echo "no-report")
  if [[ $rc -eq $want_exit && "$got" == "$want" ]]; then
    pass "installed ckptscan scan $(basename "$file") $* -> $got"
  else
    fail "installed ckptscan scan $file $*: want $want/$want_exit, got $got/$rc: $(cat "$tmp/r.err")"
  fi
}
scan 0 SAFE "$fixtures/torch/train_checkpoint.pt"
scan 0 SAFE "$fixtures/torch/train_checkpoint.pt" --rules "$rules"
scan 1 DANGEROUS "$fixtures/pickles/malicious/reduce_os_system.pkl" --rules "$rules"

# The installed daemon starts with the installed worker.
mkdir -p "$tmp/d"
# With the installed config file (the command line wins over it for the socket and state).
"$prefix/bin/ckptscand" --config "$prefix/etc/ckptscan/ckptscand.conf" --socket "$tmp/d/s.sock" \
  --state-dir "$tmp/d/state" --max-running 1 --rules "$rules" 2>"$tmp/d/log" &
dpid=$!
for _ in $(seq 200); do
  grep -q '"event":"listening"' "$tmp/d/log" 2>/dev/null && break
  kill -0 "$dpid" 2>/dev/null || break
  sleep 0.05
done
if grep -q '"event":"listening"' "$tmp/d/log"; then
  pass "installed ckptscand starts (start-up job through the installed worker)"
  "$bin" scan --server "unix:$tmp/d/s.sock" "$fixtures/torch/train_checkpoint.pt" >/dev/null 2>&1 &&
    pass "installed ckptscan scans through the installed ckptscand" ||
    fail "scan through the installed daemon failed"
  # What `systemctl reload` runs (ExecReload), as the daemon's own uid.
  "$bin" admin reload-rules --server "unix:$tmp/d/s.sock" >"$tmp/reload.out" 2>&1 &&
    pass "the unit's reload command reloads the rules" ||
    fail "reload-rules: $(cat "$tmp/reload.out")"
  kill -TERM "$dpid"; wait "$dpid"; dpid=
else
  fail "installed ckptscand did not start: $(cat "$tmp/d/log")"
fi

# The worker it used was the installed one: without it the installed CLI cannot scan.
mv "$prefix/bin/ckptscan-worker" "$tmp/worker.away"
(cd "$tmp" && "$bin" scan "$fixtures/torch/train_checkpoint.pt") >"$tmp/r.out" 2>&1
rc=$?
[[ $rc -eq 2 ]] && pass "without bin/ckptscan-worker the installed CLI exits 2 (it uses the one beside it)" ||
  fail "with the installed worker moved away the installed CLI exited $rc: $(cat "$tmp/r.out")"
mv "$tmp/worker.away" "$prefix/bin/ckptscan-worker"

# The install is relocatable: moved under a path with a space, the CLI still finds its worker.
moved="$tmp/moved prefix"
mv "$prefix" "$moved"
bin="$moved/bin/ckptscan"
scan 1 DANGEROUS "$fixtures/pickles/malicious/reduce_os_system.pkl"

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "PASS: install layout"
