#!/usr/bin/env bash
# Install the pinned axe-core (tests/browser/axe/package.json and its package-lock.json)
# into var/npm, where tests/browser/test_admin_accessibility.py loads axe.min.js from.
# Idempotent: does nothing when the pinned version is already there. `make test` calls it.
# Without npm it fails in CI (CI=true), where the accessibility test must run; locally it
# says so and the test skips with a banner.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[axe] %s\n' "$*"; }
in_ci() { case "${CI:-}" in 1 | true | yes) return 0 ;; *) return 1 ;; esac; }

npm=${ARCATURE_NPM:-npm}
source_dir=tests/browser/axe
target=var/npm
want=$(sed -n 's/.*"axe-core": *"\([^"]*\)".*/\1/p' "$source_dir/package.json" | head -1)
installed=$(grep -o '"version": *"[^"]*"' "$target/node_modules/axe-core/package.json" 2>/dev/null \
  | head -1 | sed 's/.*"\([^"]*\)"$/\1/' || true)

if [ -n "$want" ] && [ "$installed" = "$want" ] && [ -s "$target/node_modules/axe-core/axe.min.js" ] \
  && cmp -s "$source_dir/package-lock.json" "$target/package-lock.json"; then
  log "axe-core $want already in $target"
  exit 0
fi
if ! command -v "$npm" >/dev/null 2>&1; then
  if in_ci; then
    log "npm is missing (apt-get install npm): CI=true needs axe-core for the accessibility test"
    exit 1
  fi
  log "npm is missing: the accessibility test will SKIP (apt-get install npm, then run this again)"
  exit 0
fi
mkdir -p "$target"
cp "$source_dir/package.json" "$source_dir/package-lock.json" "$target/"
log "installing axe-core $want into $target"
"$npm" ci --prefix "$target" --no-audit --no-fund --loglevel=error
test -s "$target/node_modules/axe-core/axe.min.js"
log "axe-core $want ready: $target/node_modules/axe-core/axe.min.js"
