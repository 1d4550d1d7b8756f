# Sourced by find-python.sh (make demo) and python-path.sh (make test); defines
# pyenv_root, which prints pyenv's root folder whether or not pyenv is on PATH (a
# shell without `pyenv init`, cron, an IDE): `pyenv root` when it is, else
# $PYENV_ROOT, else ~/.pyenv.
pyenv_root() {
  if command -v pyenv >/dev/null 2>&1; then
    pyenv root
  else
    echo "${PYENV_ROOT:-${HOME:-/nonexistent}/.pyenv}"
  fi
}
