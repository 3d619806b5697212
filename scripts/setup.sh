#!/usr/bin/env bash
# Installs what ckptscan needs to build and test, from Debian 12 packages only.
# Idempotent: packages already installed are not touched, and apt is not called at all
# when nothing is missing. Runs apt-get as root, or through sudo otherwise.
#
#   scripts/setup.sh          build + test dependencies
#   scripts/setup.sh --dev    also Debian's python3-torch/numpy/joblib, needed only to regenerate fixtures
#   scripts/setup.sh --bazel  also Debian's bazel-bootstrap (Bazel 4.2.3 + a JDK), for the optional
#                             Bazel build (docs/bazel.md; scripts/bazel.sh). Not needed for CMake.
# Options combine: scripts/setup.sh --dev --bazel
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libseccomp-dev libabsl-dev libssl-dev libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev zlib1g-dev python3 python3-jsonschema
)
for opt in "$@"; do
  case "$opt" in
    --dev) packages+=(python3-torch python3-numpy python3-joblib) ;;
    # bazel-bootstrap pulls default-jdk-headless itself; the rule sets it would download are
    # replaced by stubs in third_party/bazel (docs/bazel.md).
    --bazel) packages+=(bazel-bootstrap) ;;
    *) echo "setup: unknown option: $opt (expected --dev and/or --bazel)" >&2; exit 64 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

as_root=()
if [[ "$(id -u)" -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  as_root=(sudo)
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -q
"${as_root[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
