#!/usr/bin/env bash
# Prints the path of a kubectl-validate (sigs.k8s.io/kubectl-validate: the
# API server's own validation of an object against the built-in Kubernetes
# schemas it embeds, offline), building one when none is found:
# $KUBECTL_VALIDATE, then `kubectl-validate` on the PATH, then the cached copy
# in ${ORDERPIPE_CACHE:-~/.cache/orderpipe}/bin. It is built with `go install
# module@version`, in a module of its own: its k8s.io and OpenTelemetry
# versions never enter orderpipe's go.mod. `make test` runs this first, so
# deploy/kubectl_validate_test.go finds it on a fresh machine (CI).
set -euo pipefail
version=v0.0.4

if [ -n "${KUBECTL_VALIDATE:-}" ] && [ -x "${KUBECTL_VALIDATE}" ]; then echo "$KUBECTL_VALIDATE"; exit 0; fi
if command -v kubectl-validate >/dev/null 2>&1; then command -v kubectl-validate; exit 0; fi
bin="${ORDERPIPE_CACHE:-$HOME/.cache/orderpipe}/bin"
if [ -x "$bin/kubectl-validate" ]; then echo "$bin/kubectl-validate"; exit 0; fi
echo "kubectl-validate.sh: building sigs.k8s.io/kubectl-validate@$version into $bin (a few minutes, once)" >&2
mkdir -p "$bin"
(cd "${TMPDIR:-/tmp}" && GOBIN="$bin" GOFLAGS= go install "sigs.k8s.io/kubectl-validate@$version") >&2
echo "$bin/kubectl-validate"
