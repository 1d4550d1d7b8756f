#!/usr/bin/env bash
# Print the path of a Python >= 3.12 (newest first), or explain what is missing.
# Looks on PATH, then in pyenv's versions (whose shims say "command not found"
# until a version is selected), then at plain python3.
set -u
want_minor=${1:-12}

works() { "$1" -c "import sys; sys.exit(0 if sys.version_info >= (3, $want_minor) else 1)" >/dev/null 2>&1; }

candidates=()
for name in python3.14 python3.13 python3.12; do
  path=$(command -v "$name" 2>/dev/null) && candidates+=("$path")
done
if command -v pyenv >/dev/null 2>&1; then
  root=$(pyenv root)
  for dir in $(ls -d "$root"/versions/3.1[2-9]* 2>/dev/null | sort -rV); do
    candidates+=("$dir/bin/python")
  done
fi
for name in python3 python; do
  path=$(command -v "$name" 2>/dev/null) && candidates+=("$path")
done

for candidate in "${candidates[@]}"; do
  if works "$candidate"; then
    echo "$candidate"
    exit 0
  fi
done
echo "error: no Python 3.$want_minor or newer found (looked for python3.13, python3.12, pyenv versions, python3)." >&2
echo "Install one, e.g. 'apt-get install python3.12 python3.12-venv', 'pyenv install 3.12', or from python.org." >&2
exit 1
