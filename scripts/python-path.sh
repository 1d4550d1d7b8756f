#!/usr/bin/env bash
# Print a PATH fragment holding python3.12 and python3.13 (for tox's base_python),
# found wherever scripts/find-python.sh can find them. Missing ones are reported.
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin="$here/../.tox/pythons"
mkdir -p "$bin"
for minor in 12 13; do
  found=""
  for candidate in "$(command -v python3.$minor 2>/dev/null)" \
      $(command -v pyenv >/dev/null 2>&1 && ls -d "$(pyenv root)"/versions/3.$minor.*/bin/python 2>/dev/null | sort -rV); do
    [ -n "$candidate" ] && "$candidate" -c "import sys; assert sys.version_info[:2] == (3, $minor)" >/dev/null 2>&1 \
      && { found=$candidate; break; }
  done
  if [ -n "$found" ]; then
    ln -sf "$found" "$bin/python3.$minor"
  else
    echo "warning: python3.$minor not found; its tox environments will fail" >&2
  fi
done
cd "$bin" && pwd
