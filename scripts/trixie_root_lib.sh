# shellcheck shell=bash
# Sourced (not run) by the scripts that work inside the Debian 13 root (scripts/modern_root.sh):
# scripts/loader_matrix_trixie.sh and scripts/scan_then_load_trixie.sh. Needs bash and root.
#
#   mount_once TARGET MOUNT-ARGS...   mounts at TARGET (made if missing) unless something is
#                                     mounted there already; remembered for unmount_all
#   unmount_all                       unmounts what mount_once mounted, last first (call it
#                                     from the sourcing script's EXIT trap)
#   root_install DIR PACKAGE...       apt-get installs in the root DIR the packages dpkg does
#                                     not list as installed (network: resolv.conf is copied in)

trixie_mounted=()

mount_once() {
  local target="$1"; shift
  mkdir -p "$target"
  if ! mountpoint -q "$target"; then
    mount "$@" "$target"
    trixie_mounted+=("$target")
  fi
}

unmount_all() {
  local i
  for (( i=${#trixie_mounted[@]}-1; i>=0; i-- )); do
    umount "${trixie_mounted[$i]}" 2>/dev/null || umount -l "${trixie_mounted[$i]}" || true
  done
  trixie_mounted=()
}

root_install() {
  local dir="$1" p missing=()
  shift
  for p in "$@"; do
    [[ "$(chroot "$dir" dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" == "install ok installed" ]] ||
      missing+=("$p")
  done
  if [[ ${#missing[@]} -gt 0 ]]; then
    cp /etc/resolv.conf "$dir/etc/resolv.conf"
    echo "=== apt-get install ${missing[*]} (in $dir)" >&2
    chroot "$dir" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
    chroot "$dir" apt-get clean
  fi
}
