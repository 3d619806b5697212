#!/usr/bin/env bash
# Builds (or reuses) the Debian 13 (trixie) root that writes the modern fixture corpus:
# Python 3.13 with Debian's torch 2.6, numpy 2.2, safetensors and joblib 1.4
# (tests/fixtures/modern/gen_modern.py; docs/fixtures.md, "The modern corpus").
#
#   scripts/modern_root.sh [--mirror URL] [DIR]
#     DIR           where the root lives (default ${XDG_CACHE_HOME:-$HOME/.cache}/ckptscan/trixie)
#     --mirror URL  the Debian mirror (default: the first one apt uses here, else deb.debian.org)
#
# Steps, each skipped when already done, so a second run only prints the versions:
#   1. `debootstrap --variant=minbase trixie DIR` (about a minute) unless DIR/usr/bin/apt-get exists;
#   2. `apt-get install --no-install-recommends python3-torch python3-numpy python3-safetensors
#      python3-joblib` in the root (about two minutes) unless dpkg already lists all four.
# /proc is mounted in the root only while apt-get and the version check run, and only if it
# was not mounted already. Needs root and debootstrap (apt-get install debootstrap).
set -euo pipefail
PACKAGES=(python3-torch python3-numpy python3-safetensors python3-joblib)
dir="${XDG_CACHE_HOME:-$HOME/.cache}/ckptscan/trixie"
mirror=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --mirror) mirror="$2"; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    -*) echo "modern_root: unknown argument: $1 (see --help)" >&2; exit 64 ;;
    *) dir="$1"; shift ;;
  esac
done
[[ $(id -u) -eq 0 ]] || { echo "modern_root: needs root (debootstrap, chroot, mount)" >&2; exit 1; }
if [[ -z "$mirror" ]]; then
  mirror=$(grep -hoE '^(URIs:|deb) *https?://[^ ]+/debian/?( |$)' \
             /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list \
             2>/dev/null | head -1 | grep -oE 'https?://[^ ]+' || true)
  mirror="${mirror:-http://deb.debian.org/debian}"
fi

proc_mounted_here=0
cleanup() {
  if [[ $proc_mounted_here -eq 1 ]]; then umount "$dir/proc" || umount -l "$dir/proc"; fi
}
trap cleanup EXIT
with_proc() {  # mount /proc in the root for the steps that need it
  if [[ ! -e "$dir/proc/self" ]]; then
    mount -t proc proc "$dir/proc"
    proc_mounted_here=1
  fi
}

if [[ ! -x "$dir/usr/bin/apt-get" ]]; then
  command -v debootstrap >/dev/null ||
    { echo "modern_root: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }
  if [[ -e "$dir" && -n "$(ls -A "$dir")" ]]; then
    echo "modern_root: $dir is not empty and holds no Debian root; remove it or pick another DIR" >&2
    exit 1
  fi
  mkdir -p "$dir"
  echo "=== debootstrap --variant=minbase trixie $dir ($mirror)"
  log="$(dirname "$dir")/debootstrap.$$.log"
  debootstrap --variant=minbase trixie "$dir" "$mirror" >"$log" 2>&1 ||
    { tail -20 "$log"; echo "modern_root: debootstrap failed (log: $log)" >&2; exit 1; }
  rm -f "$log"
  echo "deb $mirror trixie main" >"$dir/etc/apt/sources.list"
fi

installed() {  # all of PACKAGES installed in the root?
  local p
  for p in "${PACKAGES[@]}"; do
    [[ "$(chroot "$dir" dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" == "install ok installed" ]] ||
      return 1
  done
}
if ! installed; then
  with_proc
  cp /etc/resolv.conf "$dir/etc/resolv.conf"
  echo "=== apt-get install --no-install-recommends ${PACKAGES[*]} (in $dir)"
  chroot "$dir" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
    apt-get update -q
  chroot "$dir" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${PACKAGES[@]}"
  chroot "$dir" apt-get clean
  installed || { echo "modern_root: ${PACKAGES[*]} not all installed in $dir" >&2; exit 1; }
fi

with_proc
chroot "$dir" env -i PATH=/usr/bin:/bin python3 -c '
import sys, torch, numpy, safetensors, joblib
print("python %s, torch %s, numpy %s, safetensors %s, joblib %s" % (sys.version.split()[0],
      torch.__version__, numpy.__version__, safetensors.__version__, joblib.__version__))' 2>/dev/null
echo "modern_root: ready: $dir"
