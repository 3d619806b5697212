#!/usr/bin/env bash
# Runs the loader matrix (tests/loaders/loader_matrix.py) inside the Debian 13 (trixie) root:
# Python 3.13, torch 2.6 (weights_only False/True, mmap), numpy 2.2, joblib 1.4, safetensors,
# onnx, onnxruntime 1.21, h5py, PyTables.
#
#   scripts/loader_matrix_trixie.sh [--root-dir DIR] --files-root ROOT --out OUT.jsonl
#                                   [-- LOADER_MATRIX_ARGS...] PATH...
#     DIR          the trixie root (default ${XDG_CACHE_HOME:-$HOME/.cache}/ckptscan/trixie)
#     ROOT         the folder the file keys are relative to; every PATH must be inside it
#     OUT.jsonl    written here (outside the root)
#
# Steps: scripts/modern_root.sh DIR (makes or reuses the root: torch, numpy, safetensors,
# joblib); apt-get installs python3-onnx python3-onnxruntime python3-h5py python3-tables and
# strace (it records the files onnxruntime opens from C++, out of the audit hook's sight) in it
# unless dpkg lists them; ROOT is bind-mounted read-only at DIR/mnt/ckpt_files and
# tests/loaders at DIR/mnt/ckpt_loaders, /proc is mounted (onnxruntime reads /proc/cpuinfo);
# then `chroot DIR python3 /mnt/ckpt_loaders/loader_matrix.py --root /mnt/ckpt_files ...`.
# Everything mounted here is unmounted on exit. Needs root.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
dir="${XDG_CACHE_HOME:-$HOME/.cache}/ckptscan/trixie"
files_root=""
out=""
extra=()
paths=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --root-dir) dir="$2"; shift 2 ;;
    --files-root) files_root="$(cd "$2" && pwd)"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --) shift; while [[ $# -gt 0 && "$1" != "--paths" ]]; do extra+=("$1"); shift; done
        [[ $# -gt 0 ]] && shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) paths+=("$1"); shift ;;
  esac
done
[[ -n "$files_root" && -n "$out" && ${#paths[@]} -gt 0 ]] ||
  { echo "loader_matrix_trixie: needs --files-root, --out and paths (see --help)" >&2; exit 64; }
[[ $(id -u) -eq 0 ]] || { echo "loader_matrix_trixie: needs root (chroot, mount)" >&2; exit 1; }

bash "$here/modern_root.sh" "$dir" >&2

# shellcheck source=scripts/trixie_root_lib.sh
source "$here/trixie_root_lib.sh"
trap unmount_all EXIT
mount_once "$dir/proc" -t proc proc
root_install "$dir" python3-onnx python3-onnxruntime python3-h5py python3-tables strace

mount_once "$dir/mnt/ckpt_files" --bind -o ro "$files_root"
mount -o remount,ro,bind "$dir/mnt/ckpt_files"
mount_once "$dir/mnt/ckpt_loaders" --bind -o ro "$repo/tests/loaders"
mount -o remount,ro,bind "$dir/mnt/ckpt_loaders"
inside=()
for p in "${paths[@]}"; do
  abs="$(cd "$(dirname "$p")" && pwd)/$(basename "$p")"
  case "$abs/" in
    "$files_root"/*) inside+=("/mnt/ckpt_files${abs#"$files_root"}") ;;
    *) echo "loader_matrix_trixie: $p is not under $files_root" >&2; exit 64 ;;
  esac
done
tmp_out="$(mktemp -d "$dir/tmp/ckpt_matrix_out.XXXXXX")"
chroot "$dir" env -i PATH=/usr/bin:/bin HOME=/tmp LANG=C.UTF-8 \
  python3 /mnt/ckpt_loaders/loader_matrix.py --root /mnt/ckpt_files \
  --out "/tmp/$(basename "$tmp_out")/out.jsonl" "${extra[@]}" "${inside[@]}"
mkdir -p "$(dirname "$out")"
mv "$tmp_out/out.jsonl" "$out"
rmdir "$tmp_out"
echo "loader_matrix_trixie: wrote $out" >&2
