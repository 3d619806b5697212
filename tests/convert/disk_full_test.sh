#!/usr/bin/env bash
# Disk full while converting: a clear error (exit 2), and nothing left in the destination —
# no partial output, no temporary file, no staging directory. The destination is a small
# tmpfs mounted in a private mount namespace (`unshare -rm`, no root needed); where user
# namespaces are not available the test says so and is skipped.
#   tests/convert/disk_full_test.sh path/to/ckptscan path/to/fixtures
set -uo pipefail
bin="$(realpath "${1:?usage: disk_full_test.sh path/to/ckptscan path/to/fixtures}")"
fixtures="$(realpath "${2:?fixtures folder}")"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../../clients/test_lib.sh"
enter_tmp

if ! unshare -rm true 2>/dev/null; then
  echo "SKIP: user and mount namespaces are not available here (unshare -rm failed);" \
       "the disk-full cases need a private tmpfs"
  exit 0
fi

# A 1 MiB float32 .npy, written with the stdlib (numpy's format: magic, version 1.0, header).
/usr/bin/python3 - <<'PY'
import struct
n = 1 << 18
header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d,), }" % n
pad = 64 - (10 + len(header) + 1) % 64
header = header + " " * pad + "\n"
with open("big.npy", "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    f.write(struct.pack("<f", 0.5) * n)
PY

# Runs the cases inside the namespace; prints ok/FAIL lines, exits with the failure count.
mkdir dest
unshare -rm bash -s "$bin" "$fixtures" "$here" <<'SH'
set -uo pipefail
bin="$1"; fixtures="$2"; here="$3"
source "$(dirname "$here")/../clients/test_lib.sh"
mount -t tmpfs -o size=256k none dest || { echo "FAIL mount tmpfs"; exit 1; }
empty() { [[ -z "$(ls -A dest)" ]]; }

for flags in "" "--no-sandbox"; do
  name="disk full ${flags:-jailed}: a 1 MiB output into 256 KiB fails (exit 2), nothing left"
  if run "$name" 2 "$bin" convert $flags big.npy -o dest/big.safetensors; then
    if ! empty; then fail "$name" "left: $(ls -A dest)"
    elif ! grep -qi "space" err.txt; then fail "$name" "no reason: $(cat err.txt)"
    else pass "$name"; fi
  fi
done

umount dest && mount -t tmpfs -o size=4k none dest
name="disk full: a sharded set into 4 KiB fails (exit 2), no OUT and no staging left"
if run "$name" 2 "$bin" convert "$fixtures/torch/sharded/pytorch_model.bin.index.json" \
    -o dest/set; then
  if ! empty; then fail "$name" "left: $(ls -A dest)"; else pass "$name"; fi
fi
finish
SH
