#!/usr/bin/env bash
# Prints the path of a promtool (Prometheus's rule checker and rule unit-test
# runner), fetching one when none is found: $PROMTOOL, then `promtool` on the
# PATH, then the cached copy in ${ORDERPIPE_CACHE:-~/.cache/orderpipe}/prometheus.
# The copy comes from Debian's `prometheus` package, unpacked, never installed:
# installing it would start a Prometheus server on :9090. `make test` runs this
# first, so deploy/prometheus_test.go finds promtool on a fresh machine (CI).
set -euo pipefail

if [ -n "${PROMTOOL:-}" ] && [ -x "${PROMTOOL}" ]; then echo "$PROMTOOL"; exit 0; fi
if command -v promtool >/dev/null 2>&1; then command -v promtool; exit 0; fi
cache="${ORDERPIPE_CACHE:-$HOME/.cache/orderpipe}/prometheus"
bin="$cache/usr/bin/promtool"
if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then echo "$bin"; exit 0; fi

log() { echo "promtool.sh: $*" >&2; }
SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
# A fresh machine may have no package lists yet.
if ! apt-cache show prometheus >/dev/null 2>&1; then
  log "apt-get update (no package list names prometheus)"
  $SUDO apt-get update -qq >&2
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"
log "fetching Debian's prometheus package for promtool into $cache"
# As root apt fetches as _apt, which cannot write to a private temp dir: say so.
(cd "$tmp" && apt-get download -qq -o APT::Sandbox::User=root prometheus >&2)
dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x"
mkdir -p "$cache/usr/bin"
install -m 0755 "$tmp/x/usr/bin/promtool" "$bin.new"
mv "$bin.new" "$bin"
"$bin" --version >&2
echo "$bin"
