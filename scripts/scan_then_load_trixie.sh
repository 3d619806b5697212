#!/usr/bin/env bash
# Runs clients/python/scan_then_load_matrix.py in the Debian 13 (trixie) root: Python 3.13 and
# torch 2.6 load every SAFE torch fixture through scan_then_load, whose scans go to a ckptscand
# on this host (Debian 12's build: its CLI does not run in the root, other shared libraries).
#
#   scripts/scan_then_load_trixie.sh --ckptscand PATH --out OUT.jsonl [--root-dir DIR]
#     PATH       the ckptscand binary (e.g. build/clients/ckptscand; its ckptscan-worker beside it)
#     OUT.jsonl  written here (outside the root)
#     DIR        the trixie root (default ${XDG_CACHE_HOME:-$HOME/.cache}/ckptscan/trixie)
#
# Steps: scripts/modern_root.sh DIR (makes or reuses the root: torch, numpy); apt-get installs
# python3-grpcio, protobuf-compiler and protobuf-compiler-grpc in it unless dpkg lists them
# (the client from a source tree compiles its gRPC stubs on first use: clients/python/README.md);
# ckptscand starts here on a unix socket in a fresh temporary folder (uploads only, no --root),
# and that folder is bind-mounted at DIR/mnt/ckpt_sock; this source tree is bind-mounted
# read-only at DIR/mnt/ckpt_repo, /proc is mounted; then
# `chroot DIR python3 /mnt/ckpt_repo/clients/python/scan_then_load_matrix.py --server
# unix:/mnt/ckpt_sock/s.sock --fixtures /mnt/ckpt_repo/tests/fixtures`: each file is read,
# uploaded and scanned by the daemon, and loaded by torch 2.6 in the root only when SAFE with
# the digest of the bytes read. The daemon is stopped and everything mounted here unmounted on
# exit. Needs root. About 1 minute once the root has its packages.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
dir="${XDG_CACHE_HOME:-$HOME/.cache}/ckptscan/trixie"
ckptscand=""
out=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --root-dir) dir="$2"; shift 2 ;;
    --ckptscand) ckptscand="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "scan_then_load_trixie: unknown argument $1 (see --help)" >&2; exit 64 ;;
  esac
done
[[ -n "$ckptscand" && -n "$out" ]] ||
  { echo "scan_then_load_trixie: needs --ckptscand and --out (see --help)" >&2; exit 64; }
[[ -x "$ckptscand" ]] || { echo "scan_then_load_trixie: $ckptscand is not executable" >&2; exit 64; }
[[ $(id -u) -eq 0 ]] || { echo "scan_then_load_trixie: needs root (chroot, mount)" >&2; exit 1; }

bash "$here/modern_root.sh" "$dir" >&2

# shellcheck source=scripts/trixie_root_lib.sh
source "$here/trixie_root_lib.sh"
daemon_pid=""
work=""
cleanup() {
  unmount_all
  if [[ -n "$daemon_pid" ]]; then kill "$daemon_pid" 2>/dev/null || true; wait "$daemon_pid" || true; fi
  if [[ -n "$work" ]]; then rm -rf "$work"; fi
}
trap cleanup EXIT
mount_once "$dir/proc" -t proc proc
root_install "$dir" python3-grpcio protobuf-compiler protobuf-compiler-grpc

# The daemon: a socket path short enough for sun_path, its state beside it.
work="$(mktemp -d /tmp/ckpt-s2l.XXXXXX)"
mkdir "$work/sock"
"$ckptscand" --socket "$work/sock/s.sock" --state-dir "$work/state" \
  2>"$work/daemon.log" </dev/null >/dev/null &
daemon_pid=$!
for _ in $(seq 200); do
  grep -q '"event":"listening"' "$work/daemon.log" 2>/dev/null && break
  kill -0 "$daemon_pid" 2>/dev/null || break
  sleep 0.1
done
grep -q '"event":"listening"' "$work/daemon.log" ||
  { cat "$work/daemon.log" >&2; echo "scan_then_load_trixie: ckptscand did not start" >&2; exit 1; }

mount_once "$dir/mnt/ckpt_sock" --bind "$work/sock"
mount_once "$dir/mnt/ckpt_repo" --bind -o ro "$repo"
mount -o remount,ro,bind "$dir/mnt/ckpt_repo"
tmp_out="$(mktemp -d "$dir/tmp/ckpt_s2l_out.XXXXXX")"
rc=0
chroot "$dir" env -i PATH=/usr/bin:/bin HOME=/tmp LANG=C.UTF-8 \
  CKPTSCAN_STUBS_DIR="/tmp/$(basename "$tmp_out")/stubs" \
  python3 /mnt/ckpt_repo/clients/python/scan_then_load_matrix.py \
  --fixtures /mnt/ckpt_repo/tests/fixtures --server unix:/mnt/ckpt_sock/s.sock \
  --out "/tmp/$(basename "$tmp_out")/out.jsonl" || rc=$?
if [[ -f "$tmp_out/out.jsonl" ]]; then
  mkdir -p "$(dirname "$out")"
  mv "$tmp_out/out.jsonl" "$out"
  echo "scan_then_load_trixie: wrote $out" >&2
fi
rm -rf "$tmp_out"
exit "$rc"
