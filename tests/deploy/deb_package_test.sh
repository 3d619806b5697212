#!/usr/bin/env bash
# The Debian package cmake/package.cmake describes: built with cpack from this build, its
# metadata and files, and its binaries scanning once extracted.
#   deb_package_test.sh CPACK BUILD_DIR SOURCE_DIR
# Proves: cpack -G DEB writes ckptscan_<version>_<arch>.deb; Depends was computed from the
# binaries (the daemon's gRPC and protobuf libraries are there, no build-only package is); the
# three binaries, the rules, the docs and the systemd unit (with /usr paths, LimitNOFILE and the
# hardening directives) are in it; postinst creates the system user; the extracted ckptscan
# scans a SAFE fixture (exit 0) and a malicious one (exit 1) with the extracted worker. The
# package installed into a fresh Debian 12 root: scripts/fresh_root_check.sh --package DEB.
set -uo pipefail
cpack="$1"
build="$(realpath "$2")"
src="$(realpath "$3")"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }
command -v dpkg-deb >/dev/null || { echo "skip: dpkg-deb is not installed"; exit 77; }
command -v dpkg-shlibdeps >/dev/null ||
  { echo "skip: dpkg-shlibdeps (dpkg-dev) is not installed: Depends cannot be computed"; exit 77; }

if ! (cd "$tmp" && "$cpack" -G DEB --config "$build/CPackConfig.cmake" -B "$tmp/out") \
     >"$tmp/cpack.log" 2>&1; then
  tail -30 "$tmp/cpack.log"
  echo "FAIL: cpack -G DEB"
  exit 1
fi
deb=$(ls "$tmp"/out/ckptscan_*.deb 2>/dev/null | head -1)
[[ -n "$deb" ]] || { cat "$tmp/cpack.log"; echo "FAIL: no ckptscan_*.deb written"; exit 1; }
pass "cpack wrote $(basename "$deb") ($(stat -c %s "$deb") bytes)"

[[ "$(dpkg-deb -f "$deb" Package)" == "ckptscan" ]] && pass "Package: ckptscan" ||
  fail "Package: $(dpkg-deb -f "$deb" Package)"
depends=$(dpkg-deb -f "$deb" Depends)
echo "   Depends: $depends"
for lib in 'libgrpc\+\+' 'libprotobuf' 'libc6'; do
  grep -qE "(^|, )$lib" <<<"$depends" && pass "Depends names $lib (computed from the binaries)" ||
    fail "Depends lacks $lib: $depends"
done
for build_only in libgtest libbenchmark '-dev'; do
  grep -q -- "$build_only" <<<"$depends" && fail "Depends names a build-only package ($build_only)"
done

dpkg-deb -c "$deb" >"$tmp/contents.txt"
for f in ./usr/bin/ckptscan ./usr/bin/ckptscand ./usr/bin/ckptscan-worker \
         ./usr/share/ckptscan/rules/default_rules.textproto ./usr/share/doc/ckptscan/README.md \
         ./usr/share/doc/ckptscan/daemon.md ./usr/lib/systemd/system/ckptscand.service \
         ./usr/share/doc/ckptscan/copyright ./usr/share/man/man1/ckptscan.1.gz \
         ./usr/share/man/man8/ckptscand.8.gz ./usr/share/bash-completion/completions/ckptscan \
         ./usr/share/zsh/vendor-completions/_ckptscan ./etc/ckptscan/ckptscand.conf; do
  grep -q " $f\$" "$tmp/contents.txt" && pass "contains $f" || fail "missing $f"
done
grep -q "build/\|\.o\$\|_test\$" "$tmp/contents.txt" &&
  fail "build artefacts in the package: $(grep 'build/\|\.o$\|_test$' "$tmp/contents.txt" | head -3)"

dpkg-deb -e "$deb" "$tmp/control"
[[ -x "$tmp/control/postinst" ]] && grep -q "useradd --system" "$tmp/control/postinst" &&
  pass "postinst creates the system user" || fail "postinst missing or not creating the user"

[[ "$(cat "$tmp/control/conffiles" 2>/dev/null)" == "/etc/ckptscan/ckptscand.conf" ]] &&
  pass "conffiles: /etc/ckptscan/ckptscand.conf (dpkg keeps a site's edits)" ||
  fail "conffiles: '$(cat "$tmp/control/conffiles" 2>/dev/null)'"

dpkg-deb -x "$deb" "$tmp/root"
# Every static library the build links into the shipped binaries is named in the copyright file.
copyright="$tmp/root/usr/share/doc/ckptscan/copyright"
# (The link lines of the two static binaries: Ninja's build.ninja, or Make's link.txt files.)
linked=$( { grep -E '^build clients/ckptscan(-worker)?: ' "$build/build.ninja" 2>/dev/null
            cat "$build"/clients/CMakeFiles/ckptscan.dir/link.txt \
                "$build"/sandbox/worker/CMakeFiles/ckptscan-worker.dir/link.txt 2>/dev/null; } |
         grep -oE '/usr/lib/[^ ]*/lib[^ /]*\.a' | sed 's#.*/##' | sort -u)
unnamed=""
for lib in $linked; do
  grep -qF "static:$lib" "$copyright" || grep -qF "static:${lib%%_*}_*.a" "$copyright" ||
    unnamed+=" $lib"
done
[[ -n "$linked" && -z "$unnamed" ]] &&
  pass "copyright names all $(wc -w <<<"$linked") static libraries the build links" ||
  fail "copyright lacks static libraries:${unnamed:- (no link lines found in $build)}"
unit="$tmp/root/usr/lib/systemd/system/ckptscand.service"
for line in "ExecStart=/usr/bin/ckptscand --config /etc/ckptscan/ckptscand.conf" \
            "ExecReload=/usr/bin/ckptscan admin reload-rules --server unix:/run/ckptscan/ckptscand.sock" \
            "LimitNOFILE=65536" "NoNewPrivileges=yes" \
            "ProtectSystem=strict" "PrivateTmp=yes" "RestrictAddressFamilies=" "User=ckptscan"; do
  grep -q "^$line" "$unit" && pass "unit: $line" || fail "unit lacks $line"
done
grep -q "/usr/local/" "$unit" && fail "unit still names /usr/local: $(grep /usr/local/ "$unit")"

# The extracted binaries, side by side: the worker beside ckptscan is the one used.
bin="$tmp/root/usr/bin/ckptscan"
"$bin" scan "$src/tests/fixtures/torch/train_checkpoint.pt" >"$tmp/safe.txt" 2>&1
rc=$?
[[ $rc -eq 0 ]] && grep -q "SAFE" "$tmp/safe.txt" && pass "the packaged ckptscan: SAFE, exit 0" ||
  fail "packaged scan of a SAFE fixture: exit $rc: $(cat "$tmp/safe.txt")"
"$bin" scan "$src/tests/fixtures/pickles/malicious/inst_os_system.pkl" >"$tmp/evil.txt" 2>&1
rc=$?
[[ $rc -eq 1 ]] && grep -q "DANGEROUS" "$tmp/evil.txt" &&
  pass "the packaged ckptscan: DANGEROUS, exit 1" ||
  fail "packaged scan of a malicious fixture: exit $rc: $(cat "$tmp/evil.txt")"
mv "$tmp/root/usr/bin/ckptscan-worker" "$tmp/worker.moved"
"$bin" scan "$src/tests/fixtures/torch/train_checkpoint.pt" >"$tmp/noworker.txt" 2>&1
rc=$?
[[ $rc -eq 2 ]] && pass "without the packaged worker it refuses (exit 2): it used the packaged one" ||
  fail "without the packaged worker: exit $rc"

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "deb package: all checks passed"
