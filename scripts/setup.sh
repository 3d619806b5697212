#!/usr/bin/env bash
# Installs what ckptscan needs to build and test, from Debian 12 packages only.
# Idempotent: packages already installed are not touched, and apt-get install is not called
# when nothing is missing. Runs apt-get as root, or through sudo otherwise. Without --build-only
# it also keeps the other Debian releases of python3's zipfile.py in ~/.cache/ckptscan/zipfile for
# the zipfile differential (tests/differential/fetch_zipfiles.sh; downloads only what is new).
#
#   scripts/setup.sh          build + test dependencies
#   scripts/setup.sh --build-only
#                             only what building needs (scripts/run.sh scan: a first verdict sooner)
#   scripts/setup.sh --dev    also Debian's python3-torch, needed only to regenerate fixtures
#   scripts/setup.sh --bazel  also Debian's bazel-bootstrap (Bazel 4.2.3 + a JDK), for the optional
#                             Bazel build (docs/bazel.md; scripts/bazel.sh). Not needed for CMake.
#   scripts/setup.sh --hardening
#                             also clang-14 and its sanitizer/libFuzzer runtimes, for the sanitizer
#                             suite, the fuzz targets and TSan (scripts/ci_hardening.sh,
#                             scripts/ci_tsan.sh; docs/security.md)
#   scripts/setup.sh --k8s    also Node.js + npm, and npm's kubernetes-models and js-yaml installed
#                             into ${CKPT_K8S_TOOLS:-~/.cache/ckptscan/k8s-tools}: the Kubernetes
#                             schema check of deploy/kubernetes (k8s_manifests_test). Optional.
# Options combine: scripts/setup.sh --dev --bazel
set -euo pipefail

# What building needs (the configure step finds every one of these; `--build-only` stops here).
packages=(
  build-essential cmake ninja-build pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libseccomp-dev libabsl-dev libssl-dev libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev zlib1g-dev
  # core/compress: joblib's bz2, lzma/xz and lz4 files (zlib above)
  libbz2-dev liblzma-dev liblz4-dev
  # grpc/health/v1/health.proto for `ckptscan health` (the daemon's side is in libgrpc++)
  grpc-proto
  # the daemon's metrics (prometheus-cpp)
  prometheus-cpp-dev
  # ONNX: the worker decodes ModelProto with code generated from libonnx-dev's onnx.proto.
  libonnx-dev
  # Rebuilds (a second checkout, the sanitizer trees, CI on a machine that built before) compile
  # only what changed (scripts/ccache_env.sh).
  ccache
  # The man pages, made from the binaries' --help when installing (cmake --install, cpack).
  help2man
)
# What the test suite needs besides.
test_packages=(
  python3 python3-jsonschema
  # the metrics' lint in the tests (promtool)
  prometheus
  # clients/python: the hub client and its tests (grpc-tools: the stubs generator fallback;
  # venv, setuptools and wheel: the offline install test)
  python3-grpcio python3-protobuf python3-grpc-tools python3-venv python3-setuptools python3-wheel
  # deploy/kubernetes: k8s_consistency_test reads the manifests with PyYAML.
  python3-yaml
  # Programs the tests call that a minimal Debian (debootstrap --variant=minbase) lacks:
  # openssl (the signing cross-check, certificate and TLS cases; libssl-dev does not bring it),
  # pkg_resources (python3 -m grpc_tools.protoc imports it), pgrep (the daemon and fault tests
  # find workers with it). Checked by scripts/fresh_root_check.sh.
  openssl python3-pkg-resources procps
  # cpack's Debian generator (deb_package_test) runs file(1) before dpkg-shlibdeps.
  file
  # install_layout_test renders the man pages (man-db) and runs the zsh completion (zsh).
  man-db zsh
  # The joblib differential (tests/differential/joblib_diff.py) loads files with the real joblib
  # (python3-lz4: joblib.load of its lz4 files).
  python3-joblib python3-numpy python3-lz4
  # The ONNX differential (tests/differential/onnx_diff.py) decodes the same bytes with onnx.
  python3-onnx
  # The chat-template differential (tests/differential/template_diff.py) renders with jinja2;
  # the loader matrix also opens every file with h5py and PyTables, as Debian 12 users can.
  python3-jinja2 python3-h5py python3-tables
)
k8s=0
build_only=0
for opt in "$@"; do
  case "$opt" in
    --build-only) build_only=1 ;;
    --dev) packages+=(python3-torch) ;;
    # bazel-bootstrap pulls default-jdk-headless itself; the rule sets it would download are
    # replaced by stubs in third_party/bazel (docs/bazel.md).
    --bazel) packages+=(bazel-bootstrap) ;;
    --hardening) packages+=(clang-14 libclang-rt-14-dev llvm-14) ;;
    --k8s) k8s=1; command -v node >/dev/null || packages+=(nodejs) ;;
    *) echo "setup: unknown option: $opt (expected --build-only, --dev, --bazel, --hardening, --k8s)" >&2
       exit 64 ;;
  esac
done

[[ $build_only -eq 1 ]] || packages+=("${test_packages[@]}")
missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

# --k8s, after the Debian packages: npm's schema models for tests/k8s/validate.js, pinned, in a
# cache directory outside the source tree (the tests look there, or in $CKPT_K8S_TOOLS).
k8s_tools() {
  local sudo=()
  [[ "$(id -u)" -ne 0 ]] && sudo=(sudo)
  if ! command -v npm >/dev/null; then
    echo "setup: installing npm"
    "${sudo[@]}" apt-get install -y -q --no-install-recommends npm
  fi
  local dir="${CKPT_K8S_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/ckptscan/k8s-tools}"
  if [[ -f "$dir/node_modules/kubernetes-models/package.json" &&
        -f "$dir/node_modules/js-yaml/package.json" ]]; then
    echo "setup: kubernetes-models and js-yaml present in $dir"
  else
    mkdir -p "$dir"
    echo "setup: npm install kubernetes-models js-yaml into $dir"
    npm install --prefix "$dir" --no-audit --no-fund kubernetes-models@5.1.0 js-yaml@4.1.0
  fi
  command -v kubectl >/dev/null ||
    echo "setup: note: kubectl is not installed, so k8s_manifests_test will skip rendering" \
         "(Debian's kubernetes-client 1.20 is too old for the kustomize features deploy/ uses;" \
         "use kubectl >= 1.27 from upstream)"
}

# The tests' other releases of Python's zipfile: the zipfile differential checks our model
# against every Debian package of python3's zipfile apt still has, not only the installed one
# (tests/differential/fetch_zipfiles.sh: apt-get download into ~/.cache/ckptscan/zipfile,
# nothing installed; skipped when cached, a note when there is no network).
zipfile_releases() {
  [[ $build_only -eq 0 ]] || return 0
  "$(dirname "${BASH_SOURCE[0]}")/../tests/differential/fetch_zipfiles.sh" ||
    echo "setup: note: could not fetch the other releases of zipfile (the differential says which it lacks)"
}

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup: all ${#packages[@]} packages present"
  zipfile_releases
  if [[ $k8s -eq 1 ]]; then k8s_tools; fi
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
zipfile_releases
if [[ $k8s -eq 1 ]]; then k8s_tools; fi
