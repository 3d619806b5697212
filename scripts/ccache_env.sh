# Sourced by scripts/run.sh, scripts/clang_build.sh and scripts/ci_tsan.sh (bash): compile
# through ccache when it is installed (scripts/setup.sh installs it), so that a rebuild — a second
# checkout, a clean CI clone on a machine that ran CI before, the sanitizer trees — recompiles
# only what changed. ccache hashes the preprocessed source, the compiler and its flags: a hit
# gives the object the same compile would have produced.
#
# Sets the array ckpt_ccache_flags (CMake launcher flags, empty without ccache) and exports
# CCACHE_DIR (default ${XDG_CACHE_HOME:-$HOME/.cache}/ckptscan/ccache, or $CKPT_CCACHE_DIR),
# CCACHE_BASEDIR (the checkout: paths inside it are hashed relative, so two clones share hits),
# CCACHE_NOHASHDIR and CCACHE_MAXSIZE (default 8G). CKPT_CCACHE=0 turns it off. Without a
# writable cache folder it is off, with a note: the build itself never depends on ccache.
ckpt_ccache_flags=()
ckpt_ccache_setup() {
  local root=$1 dir
  [[ "${CKPT_CCACHE:-1}" != 0 ]] || return 0
  command -v ccache >/dev/null 2>&1 || return 0
  dir=${CKPT_CCACHE_DIR:-${CCACHE_DIR:-${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}/ckptscan/ccache}}
  if ! mkdir -p "$dir" 2>/dev/null || [[ ! -w "$dir" ]]; then
    echo "ccache: $dir is not writable; compiling without ccache" >&2
    return 0
  fi
  export CCACHE_DIR=$dir CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=1
  export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-8G}
  ckpt_ccache_flags=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
}
