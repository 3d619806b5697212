#!/bin/sh
# The image's entrypoint: ckptscand with container defaults, and the arguments given to
# `docker run IMAGE ...`. A default is added only when the arguments do not set that flag
# (ckptscand refuses a flag given twice); with --config FILE, the file's keys are overridden by
# the defaults below, so set those as arguments instead or pass --no-defaults first.
#   --socket /run/ckptscan/ckptscand.sock  --state-dir /var/lib/ckptscan
#   --health-tcp 0.0.0.0:8081              (gRPC health alone, plaintext, for probes)
#   --tcp 0.0.0.0:8443 --tls-cert --tls-key  when $CKPT_TLS_DIR (/etc/ckptscan/tls) holds
#                                          tls.crt and tls.key; --tls-client-ca when ca.crt too
#   --signing-key $CKPT_SIGNING_KEY        when that file (/etc/ckptscan/signing/signing-key.pem;
#                                          mode 0600, owned by uid 10001) exists; else a key is
#                                          created in the state directory on first start
set -eu
daemon=/usr/local/bin/ckptscand
if [ "${1:-}" = "--no-defaults" ]; then
  shift
  exec "$daemon" "$@"
fi
tls="${CKPT_TLS_DIR:-/etc/ckptscan/tls}"
key="${CKPT_SIGNING_KEY:-/etc/ckptscan/signing/signing-key.pem}"
given=" $* "
has() {  # has FLAG...: one of the flags is among the arguments (as --flag or --flag=...)
  for f in "$@"; do
    case "$given" in *" $f "* | *" $f="*) return 0 ;; esac
  done
  return 1
}
has --socket --no-socket || set -- --socket /run/ckptscan/ckptscand.sock "$@"
has --state-dir || set -- --state-dir /var/lib/ckptscan "$@"
has --health-tcp || set -- --health-tcp 0.0.0.0:8081 "$@"
if [ -f "$tls/tls.crt" ] && [ -f "$tls/tls.key" ] && ! has --tcp; then
  set -- --tcp 0.0.0.0:8443 --tls-cert "$tls/tls.crt" --tls-key "$tls/tls.key" "$@"
  if [ -f "$tls/ca.crt" ] && ! has --tls-client-ca; then set -- --tls-client-ca "$tls/ca.crt" "$@"; fi
fi
if [ -f "$key" ] && ! has --signing-key; then set -- --signing-key "$key" "$@"; fi
exec "$daemon" "$@"
