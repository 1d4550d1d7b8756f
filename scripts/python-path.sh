#!/usr/bin/env bash
# Print a PATH fragment holding python3.12 and python3.13 (for tox's base_python),
# found on PATH or among pyenv's versions, even when pyenv itself is not on PATH
# (pyenv-root.sh). Missing ones are reported. The links go to .tox/pythons, or to
# $ARCATURE_PYTHONS_DIR.
set -u
case $0 in */*) here=$(cd "${0%/*}" && pwd) ;; *) here=$PWD ;; esac
bin="${ARCATURE_PYTHONS_DIR:-$here/../.tox/pythons}"
mkdir -p "$bin"
. "$here/pyenv-root.sh"
pyenv_root=$(pyenv_root)
for minor in 12 13; do
  found=""
  for candidate in "$(command -v python3.$minor 2>/dev/null)" \
      $(ls -d "$pyenv_root"/versions/3.$minor.*/bin/python 2>/dev/null | sort -rV); do
    [ -n "$candidate" ] && "$candidate" -c "import sys; assert sys.version_info[:2] == (3, $minor)" >/dev/null 2>&1 \
      && { found=$(readlink -f "$candidate"); break; }
  done
  if [ -n "$found" ]; then
    ln -sf "$found" "$bin/python3.$minor"
  else
    echo "warning: python3.$minor not found; its tox environments will fail" >&2
  fi
done
cd "$bin" && pwd
