#!/bin/sh
# Creates the secret files docker-compose.yml mounts (compose `secrets:`),
# with fresh random values, unless they exist. Run once from anywhere:
#   sh deploy/secrets/generate.sh
# The files never enter git (.gitignore here) nor the image (Dockerfile.dockerignore).
# Compose bind-mounts secret files with their host permissions and the
# containers run as non-root users, so the files are world-readable and the
# directory is not.
set -eu
cd "$(dirname "$0")"
chmod 700 .

random() { od -An -N24 -tx1 /dev/urandom | tr -d ' \n'; }

if [ ! -f postgres_password ]; then
  random > postgres_password
  echo "created postgres_password"
fi
if [ ! -f database_url ] || [ postgres_password -nt database_url ]; then
  # The password is hex, so it needs no URL escaping.
  printf 'postgres://orderpipe:%s@postgres:5432/orderpipe?sslmode=disable' "$(cat postgres_password)" > database_url
  echo "created database_url"
fi
if [ ! -f admin_token ]; then
  random > admin_token
  echo "created admin_token (the admin API's bearer token: cat deploy/secrets/admin_token)"
fi
if [ ! -f event_signing_key ]; then
  random > event_signing_key
  echo "created event_signing_key (signs each orders.requested event; the same for every gateway and worker)"
fi
if [ ! -f webhook_secret ]; then
  # A Standard Webhooks secret: whsec_ and the base64 of 32 random bytes.
  printf 'whsec_%s' "$(head -c 32 /dev/urandom | base64 | tr -d '\n')" > webhook_secret
  echo "created webhook_secret (signs the webhooks to WEBHOOK_URLS; give it to the receivers)"
fi
if [ ! -f grafana_admin_password ]; then
  random > grafana_admin_password
  echo "created grafana_admin_password (Grafana's admin login at http://localhost:3000)"
fi
chmod 644 postgres_password database_url admin_token event_signing_key webhook_secret grafana_admin_password
