#!/usr/bin/env bash
# debtool.sh VAR NAME PACKAGE PATH: prints the path of a Prometheus tool,
# fetching one when none is found: $VAR, then NAME on the PATH, then the
# cached copy in ${ORDERPIPE_CACHE:-~/.cache/orderpipe}/PACKAGE/PATH. The
# copy comes from Debian's PACKAGE, unpacked, never installed (installing
# `prometheus` would start a server on :9090). promtool.sh and
# pushgateway.sh are its two uses; `make test` runs them first, so the tests
# find the tools on a fresh machine (CI).
set -euo pipefail
var=$1 name=$2 pkg=$3 path=$4

if [ -n "${!var:-}" ] && [ -x "${!var}" ]; then echo "${!var}"; exit 0; fi
if command -v "$name" >/dev/null 2>&1; then command -v "$name"; exit 0; fi
cache="${ORDERPIPE_CACHE:-$HOME/.cache/orderpipe}/$pkg"
bin="$cache/$path"
if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then echo "$bin"; exit 0; fi

log() { echo "debtool.sh: $*" >&2; }
SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
# A fresh machine may have no package lists yet.
if ! apt-cache show "$pkg" >/dev/null 2>&1; then
  log "apt-get update (no package list names $pkg)"
  $SUDO apt-get update -qq >&2
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"
log "fetching Debian's $pkg package for $name into $cache"
# As root apt fetches as _apt, which cannot write to a private temp dir: say so.
(cd "$tmp" && apt-get download -qq -o APT::Sandbox::User=root "$pkg" >&2)
dpkg-deb -x "$tmp/${pkg}"_*.deb "$tmp/x"
mkdir -p "$(dirname "$bin")"
install -m 0755 "$tmp/x/$path" "$bin.new"
mv "$bin.new" "$bin"
"$bin" --version >&2
echo "$bin"
