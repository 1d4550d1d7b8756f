#!/usr/bin/env bash
# The release pipeline's build and test steps, runnable here (`make release-check`),
# in CI (`make test` ends with it) and in .github/workflows/release.yml:
#   1. build the sdist and the wheel from the checkout;
#   2. `twine check --strict` them, and scripts/check-dist.py (every template, static
#      file, migration, catalogue and py.typed in the wheel; tests and docs in the sdist);
#   3. for each supported Python, install the BUILT WHEEL (not an editable checkout)
#      into a fresh virtualenv, copy the smoke suite and the example project out of the
#      checkout, and run them there: the example project's demo on SQLite, and the smoke
#      suite (enqueue, worker process, admin pages, django.tasks) on SQLite and PostgreSQL;
#   4. run the install instructions of README.md and docs/tutorial.md as written
#      (scripts/check-install-docs.py: a clean copy, a fresh folder, no pyenv on PATH).
# Python 3.12 gets Django 5.2 with the django-tasks backport, 3.13 the newest Django:
# both django.tasks paths are tried from the wheel. Nothing is published from here.
# JUnit reports go to var/junit/wheel-*.xml, beside the tox matrix's.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
PY=${PY:-.venv/bin/python}
out=$root/var/release
junit=$root/var/junit
log() { printf '[release-check] %s\n' "$*"; }

rm -rf "$out"
mkdir -p "$out/dist" "$junit"
quiet_pip() { "$@" 2>>"$out/pip.log" >>"$out/pip.log" || { cat "$out/pip.log"; return 1; }; }
quiet_pip "$PY" -m pip install -q "build>=1.2" "twine>=6.1"

log "building the sdist and the wheel"
"$PY" -m build --sdist --wheel --outdir "$out/dist" . >"$out/build.log" 2>&1 \
  || { cat "$out/build.log"; exit 1; }
"$PY" -m twine check --strict "$out"/dist/*
"$PY" scripts/check-dist.py "$out/dist"
wheel=$(ls "$out"/dist/django_arcature-*.whl)

postgres_up() {
  "$1" -c "import psycopg; psycopg.connect('postgresql://arcature:arcature@127.0.0.1:5432/postgres').close()" \
    >/dev/null 2>&1
}

pythons=$(scripts/python-path.sh)
status=0
for minor in 12 13; do
  python="$pythons/python3.$minor"
  if [ ! -x "$python" ]; then
    log "FAILED: python3.$minor not found (see scripts/python-path.sh)"; status=1; continue
  fi
  case $minor in
    12) django=("Django>=5.2,<5.3" "django-tasks>=0.12") ;;
    *) django=("Django>=6.1,<6.2") ;;
  esac
  venv="$out/venv-3.$minor"
  log "python3.$minor: a fresh virtualenv with the wheel and ${django[*]}"
  "$python" -m venv "$venv"
  quiet_pip "$venv/bin/python" -m pip install -q --upgrade pip
  quiet_pip "$venv/bin/python" -m pip install -q "$wheel[postgres]" "${django[@]}" "pytest>=8"

  work=$(mktemp -d "${TMPDIR:-/tmp}/arcature-wheel-3.$minor.XXXXXX")
  cp -r smoke "$work/smoke"
  cp -r example_project "$work/example_project"
  find "$work" -name __pycache__ -prune -exec rm -rf {} +

  log "python3.$minor: the example project's demo (make demo), from the wheel"
  (cd "$work" && "$venv/bin/python" example_project/demo.py >"$out/demo-3.$minor.log" 2>&1) \
    || { cat "$out/demo-3.$minor.log"; log "FAILED: demo on python3.$minor"; status=1; }

  for db in sqlite postgres; do
    if [ "$db" = postgres ] && ! postgres_up "$venv/bin/python"; then
      if [ "${CI:-}" = true ]; then
        log "FAILED: PostgreSQL is unreachable on 127.0.0.1:5432 (CI=true: never skipped)"; status=1
      else
        log "!!! SKIPPED the PostgreSQL smoke run: no server on 127.0.0.1:5432 (scripts/start-databases.sh starts one)"
      fi
      continue
    fi
    log "python3.$minor: the smoke suite on $db, from the wheel"
    (cd "$work/smoke" && SMOKE_DATABASE=$db SMOKE_DB_NAME="arcature_smoke_3$minor" \
      SMOKE_CHECKOUT="$root" "$venv/bin/python" -m pytest -q -p no:cacheprovider \
      --junitxml="$junit/wheel-py3$minor-$db.xml" -o junit_family=xunit2) || status=1
  done
  rm -rf "$work"
done
log "the README's and the tutorial's install instructions, as written"
"$PY" scripts/check-install-docs.py || status=1

[ $status = 0 ] && log "passed" || log "FAILED"
exit $status
