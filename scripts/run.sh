#!/usr/bin/env bash
# One entry point that does all the set-up itself (packages, configure, build), then:
#   scripts/run.sh scan PATH...     scan files or folders (any ckptscan scan flags work)
#   scripts/run.sh test             build and run the whole test suite (ctest)
#   scripts/run.sh build            only set up and build
#   scripts/run.sh <cmd> ...        any other ckptscan command (disasm, rules, ...)
# scan and the other commands install only the build packages and build only the CLI and its
# worker (a first verdict in minutes); test and build install and build everything.
# Environment: BUILD_DIR (default: build); CI=true turns compiler warnings into errors. A new
# build directory is configured without debug info (-O2 -DNDEBUG without -g, as Bazel's CI
# config: the same code, built about a fifth faster); CKPT_DEBUG_INFO=1 keeps -g.
# Compiles go through ccache when it is installed (scripts/ccache_env.sh; CKPT_CCACHE=0: off).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
cmd="${1:-}"
[[ -n "$cmd" ]] || { sed -n '2,10p' "$0"; exit 64; }
shift

# What this command needs: the CLI and the jailed worker, or everything (tests, daemon, benches).
if [[ "$cmd" == "test" || "$cmd" == "build" ]]; then
  setup_args=()
  targets=()
  what="everything (the CLI, the worker, the daemon, the tests, fuzz targets and benchmarks)"
else
  setup_args=(--build-only)
  targets=(--target ckptscan ckptscan-worker)
  what="the CLI and its jailed worker only (scripts/run.sh build builds the rest)"
fi
say() { echo "run.sh: [${SECONDS} s] $*" >&2; }
say "installing what is missing of the Debian packages (scripts/setup.sh${setup_args[*]:+ ${setup_args[*]}})"
"$root/scripts/setup.sh" "${setup_args[@]}" >&2
# shellcheck source=scripts/ccache_env.sh
source "$root/scripts/ccache_env.sh"
ckpt_ccache_setup "$root"
werror=OFF
ci_flags=()
if [[ "${CI:-}" == "true" ]]; then werror=ON; fi
[[ "${CKPT_DEBUG_INFO:-0}" == "1" ]] || ci_flags=("-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -DNDEBUG")
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  say "configuring $build"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCKPT_WERROR="$werror" \
        "${ci_flags[@]}" "${ckpt_ccache_flags[@]}" >&2
else
  cmake -S "$root" -B "$build" -DCKPT_WERROR="$werror" "${ckpt_ccache_flags[@]}" >/dev/null
fi
say "building $what on $(nproc) cores"
cmake --build "$build" -j"$(nproc)" "${targets[@]}" >&2

case "$cmd" in
  build) ;;
  test) cd "$build" && ctest --output-on-failure -j"$(nproc)" "$@" ;;
  *) exec "$build/clients/ckptscan" "$cmd" "$@" ;;
esac
