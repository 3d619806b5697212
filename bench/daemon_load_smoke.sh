#!/usr/bin/env bash
# Bazel's daemon_load_smoke: the load generator against a real daemon, 20 calls, no timing asserted.
set -euo pipefail
exec "$1" --daemon "$2" --file "$3" --clients 1,4 --requests 20 --baseline-threads 1
