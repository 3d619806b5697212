#!/usr/bin/env bash
# Puts the zipfile.py of every Debian package of this machine's Python that apt can still
# download, other than the installed one, into a cache folder, so that the zipfile differential
# (tests/differential/zipfile_diff.py) checks our model against those releases too. Nothing is
# installed: `apt-get download` then `dpkg-deb -x` into a temporary folder, and only zipfile.py
# is kept, in CACHE/<package>_<version>/ with a VERSION file ("<package> <version>").
#
#   tests/differential/fetch_zipfiles.sh [--cache DIR] [--python python3.11]
#     --cache DIR   default ${XDG_CACHE_HOME:-$HOME/.cache}/ckptscan/zipfile
#     --python P    the interpreter whose package is fetched (default: /usr/bin/python3's)
#
# Idempotent: a version already in the cache is not downloaded again, and apt-cache reads only
# the lists apt already has (run `apt-get update` first for the newest versions). Exits 0 when
# a download fails (no network), with a note: the differential then says which ZIP64 reading it
# could not check, and tests/fixtures/zipfile_releases still covers it.
set -euo pipefail
cache="${XDG_CACHE_HOME:-$HOME/.cache}/ckptscan/zipfile"
python=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --cache) cache="$2"; shift 2 ;;
    --python) python="$2"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "fetch_zipfiles: unknown argument: $1 (see --help)" >&2; exit 64 ;;
  esac
done
python="${python:-python$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')}"
module="/usr/lib/$python/zipfile.py"
# The package that installs zipfile.py (libpython3.11-minimal in Debian 12).
package=$(dpkg-query -S "$module" 2>/dev/null | head -1 | cut -d: -f1 || true)
if [[ -z "$package" ]]; then
  echo "fetch_zipfiles: no Debian package installs $module; nothing to fetch" >&2
  exit 0
fi
installed=$(dpkg-query -W -f='${Version}' "$package")
mkdir -p "$cache"
versions=$(apt-cache madison "$package" 2>/dev/null | awk -F'|' '{gsub(/ /, "", $2); print $2}' |
           sort -u)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chmod 0755 "$tmp"  # apt's download user must be able to write there
if id _apt >/dev/null 2>&1 && [[ $(id -u) -eq 0 ]]; then chown _apt "$tmp"; fi
for v in $versions; do
  if [[ "$v" == "$installed" ]]; then
    echo "fetch_zipfiles: $package $v is installed (the differential uses $module)"
    continue
  fi
  dest="$cache/${package}_$v"
  if [[ -f "$dest/zipfile.py" && -f "$dest/VERSION" ]]; then
    echo "fetch_zipfiles: $package $v already in $dest"
    continue
  fi
  if ! (cd "$tmp" && apt-get download -q "$package=$v" >/dev/null 2>"$tmp/err"); then
    echo "fetch_zipfiles: note: could not download $package $v: $(tail -1 "$tmp/err")" >&2
    continue
  fi
  deb=$(ls "$tmp"/*.deb)
  mkdir -p "$tmp/x"
  dpkg-deb -x "$deb" "$tmp/x"
  mkdir -p "$dest"
  cp "$tmp/x$module" "$dest/zipfile.py"
  echo "$package $v" >"$dest/VERSION"
  rm -rf "$tmp/x" "$deb"
  echo "fetch_zipfiles: $package $v -> $dest"
done
