#!/usr/bin/env bash
# Print the path of a Python >= 3.12 (newest first), or explain what is missing.
# Looks on PATH, then in pyenv's versions (whose shims say "command not found"
# until a version is selected), then at plain python3. pyenv's versions are found
# even when pyenv is not on PATH (a shell without `pyenv init`, cron, an IDE):
# in $PYENV_ROOT, else ~/.pyenv.
set -u
want_minor=${1:-12}

works() { "$1" -c "import sys; sys.exit(0 if sys.version_info >= (3, $want_minor) else 1)" >/dev/null 2>&1; }

candidates=()
for name in python3.14 python3.13 python3.12; do
  path=$(command -v "$name" 2>/dev/null) && candidates+=("$path")
done
case $0 in */*) here=${0%/*} ;; *) here=. ;; esac
. "$here/pyenv-root.sh"
pyenv_root=$(pyenv_root)
for dir in $(ls -d "$pyenv_root"/versions/3.1[2-9]* 2>/dev/null | sort -rV); do
  candidates+=("$dir/bin/python")
done
for name in python3 python; do
  path=$(command -v "$name" 2>/dev/null) && candidates+=("$path")
done

for candidate in "${candidates[@]}"; do
  if works "$candidate"; then
    echo "$candidate"
    exit 0
  fi
done
{
  echo "error: no Python 3.$want_minor or newer found (looked on PATH for python3.14, python3.13," \
    "python3.12, python3 and python, and in $pyenv_root/versions)."
  for name in python3 python; do
    path=$(command -v "$name" 2>/dev/null) || continue
    echo "  $path is $("$path" -c 'import platform; print(platform.python_version())' 2>/dev/null || echo 'not runnable')"
  done
  echo "Install one: 'pyenv install 3.12', 'uv python install 3.12', python.org, or your distribution's"
  echo "package where it has one ('apt-get install python3.12 python3.12-venv'; Debian 12 has none);"
  echo "or name one that is not on PATH: make demo PYTHON_FOR_VENV=/path/to/python3.12"
} >&2
exit 1
