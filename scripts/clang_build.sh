#!/usr/bin/env bash
# Configures (once) and builds the hardening tree: clang, CKPT_FUZZ=ON, which implies
# CKPT_SANITIZE=ON (ASan + UBSan, UB fatal) for every library, test and tool, plus libFuzzer for
# tests/fuzz. One tree serves scripts/fuzz.sh and scripts/sanitize.sh (docs/security.md).
#
#   scripts/clang_build.sh [NINJA_TARGET...]      (default: everything)
#
# Environment: CKPT_FUZZ_BUILD (default build-fuzz), CKPT_JOBS (default nproc), CXX (default
# clang++-14, else clang++). -O1 -gline-tables-only: sanitizer reports with file:line, and
# about half the compile and link time of -O2 -g.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${CKPT_FUZZ_BUILD:-$root/build-fuzz}
jobs=${CKPT_JOBS:-$(nproc)}
cxx=${CXX:-$(command -v clang++-14 || command -v clang++ || true)}
if [[ -z $cxx ]]; then
  echo "clang_build.sh: no clang++ (Debian: apt-get install clang-14 libclang-rt-14-dev)" >&2
  exit 1
fi
# shellcheck source=scripts/ccache_env.sh
source "$root/scripts/ccache_env.sh"
ckpt_ccache_setup "$root"
if [[ ! -f $build/build.ninja ]] || ! grep -q '^CKPT_FUZZ:BOOL=ON' "$build/CMakeCache.txt"; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" -DCKPT_FUZZ=ON \
        "${ckpt_ccache_flags[@]}" >&2
fi
cmake --build "$build" -j"$jobs" ${1:+--target "$@"} >&2
