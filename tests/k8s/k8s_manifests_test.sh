#!/usr/bin/env bash
# deploy/kubernetes renders offline and validates against the Kubernetes API schemas.
#   k8s_manifests_test.sh SOURCE_DIR
# Renders the base and every overlay with `kubectl kustomize` (no cluster needed), then checks
# every object with tests/k8s/validate.js (npm kubernetes-models: schema + unknown fields), and
# that the validator rejects a deliberately broken copy. Exits 77 (SKIP_RETURN_CODE), with the
# reason, when kubectl, node or the npm models (`scripts/setup.sh --k8s`) are missing.
set -uo pipefail
src="$(realpath "$1")"
deploy="$src/deploy/kubernetes"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

if ! command -v kubectl >/dev/null; then
  echo "SKIPPED: kubectl is not installed, so the kustomizations cannot be rendered offline" \
       "(Debian's kubernetes-client 1.20 is too old; install kubectl >= 1.27 to run this test)"
  exit 77
fi
echo "kubectl: $(kubectl version --client 2>/dev/null | head -2 | tr '\n' ' ')"
failures=0
rendered=()
for k in "$deploy/base" "$deploy"/overlays/*/; do
  k="${k%/}"
  name="${k#"$deploy"/}"
  out="$tmp/${name//\//_}.yaml"
  if kubectl kustomize "$k" >"$out" 2>"$tmp/err"; then
    echo "ok: kubectl kustomize $name ($(grep -c '^kind:' "$out") objects)"
    rendered+=("$out")
  else
    echo "FAIL: kubectl kustomize $name: $(cat "$tmp/err")"
    failures=$((failures + 1))
  fi
done
# mTLS is in the base (its config requires client certificates); the mtls overlay, kept for
# old commands, renders the same objects.
if [[ -f "$tmp/base.yaml" && -f "$tmp/overlays_mtls.yaml" ]]; then
  if grep -q -- "require-client-cert = true" "$tmp/base.yaml"; then
    echo "ok: the base requires client certificates (require-client-cert = true)"
  else
    echo "FAIL: the base should require client certificates"
    failures=$((failures + 1))
  fi
  changed=$(diff "$tmp/base.yaml" "$tmp/overlays_mtls.yaml" | grep -c '^[<>]')
  [[ $changed -eq 0 ]] && echo "ok: overlays/mtls renders the base" ||
    { echo "FAIL: overlays/mtls differs from the base in $changed lines:";
      diff "$tmp/base.yaml" "$tmp/overlays_mtls.yaml"; failures=$((failures + 1)); }
fi
[[ $failures -ne 0 ]] && { echo "$failures failure(s)"; exit 1; }

modules="${CKPT_K8S_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/ckptscan/k8s-tools}/node_modules"
if ! command -v node >/dev/null; then
  echo "SKIPPED (schema check): node is not installed; run scripts/setup.sh --k8s." \
       "Rendering passed."
  exit 77
fi
if [[ ! -f "$modules/kubernetes-models/package.json" || ! -f "$modules/js-yaml/package.json" ]]; then
  echo "SKIPPED (schema check): npm's kubernetes-models and js-yaml are not in $modules;" \
       "run scripts/setup.sh --k8s (or set CKPT_K8S_TOOLS). Rendering passed."
  exit 77
fi
if ! node "$src/tests/k8s/validate.js" "$modules" "${rendered[@]}"; then
  echo "FAIL: schema validation"
  exit 1
fi
# The validator is not vacuous: a misspelt field and a wrongly typed one are both caught.
sed -e 's/readOnlyRootFilesystem: true/readOnlyRootFileSystem: true/' \
    -e 's/averageUtilization: \([0-9]*\)/averageUtilization: "\1"/' "$tmp/base.yaml" >"$tmp/broken.yaml"
node "$src/tests/k8s/validate.js" "$modules" "$tmp/broken.yaml" >"$tmp/broken.out" 2>&1
if [[ $? -eq 1 ]] && grep -q "unknown field .*readOnlyRootFileSystem" "$tmp/broken.out" &&
   grep -q "averageUtilization must be integer" "$tmp/broken.out"; then
  echo "ok: validate.js rejects a misspelt field and a wrongly typed one"
else
  cat "$tmp/broken.out"
  echo "FAIL: validate.js accepted a broken manifest"
  exit 1
fi
echo "PASS: deploy/kubernetes renders and validates"
