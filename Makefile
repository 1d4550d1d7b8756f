# Two commands a new user needs (README.md):
#   make demo   set up a virtualenv with Django and this package only, migrate the example
#               project on SQLite, enqueue a mixed batch of jobs, run the worker until the
#               queue is drained, print a summary
#   make test   set up everything (database servers, virtualenvs) and run the whole test
#               matrix: Python × Django × SQLite/PostgreSQL/MariaDB, plus ruff and mypy
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON_FOR_VENV = $(shell scripts/find-python.sh)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
TOX_ARGS ?=
# How many tox environments `make test` runs at once (see the comment above `test:`).
TOX_PARALLEL ?= 3

.PHONY: help venv demo-venv demo test test-quick lint docs databases bench bench-peers soak soak-properties soak-schedules clean
.PHONY: soak-chaos soak-schedules-model soak-duty-faults release-check soak-workflows axe

help:
	@echo "make demo        run the example project's jobs on SQLite (no servers needed)"
	@echo "make test        start PostgreSQL + MariaDB and run the full tox matrix (needs root or sudo)"
	@echo "make test-quick  run the suite once, on SQLite, in $(VENV)"
	@echo "make lint        ruff + mypy"
	@echo "make release-check  build the sdist and wheel, check them, run the smoke suite on the installed wheel"
	@echo "make docs        build the documentation site into var/docs-html and run its samples"
	@echo "make bench       benchmarks on every database (writes benchmarks/README.md)"
	@echo "make bench-peers ours beside five other queues (writes benchmarks/peers.md)"
	@echo "make soak        long runs on every database (soak-properties, soak-schedules, soak-chaos)"

# Two installs into one virtualenv: the demo needs only Django and the package;
# the tests add the whole development toolchain on top (pytest, tox, ruff, mypy,
# selenium, psycopg). Each has its own stamp, so `make demo` never pulls in the second.
$(VENV)/bin/python:
	@py="$(PYTHON_FOR_VENV)"; [ -n "$$py" ] || exit 1; \
	  echo "creating $(VENV) with $$py"; \
	  "$$py" -m venv $(VENV)

$(VENV)/.installed-demo: pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install -q -e .
	@touch $@

$(VENV)/.installed: pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install -q --upgrade "pip>=25.1"
	$(PY) -m pip install -q -e ".[postgres]" --group dev tox
	@touch $@

demo-venv: $(VENV)/.installed-demo
venv: $(VENV)/.installed

demo: demo-venv
	$(PY) example_project/demo.py

databases:
	$(SUDO) bash scripts/start-databases.sh

# axe-core, pinned in tests/browser/axe/, for the accessibility test of the admin pages
# (tests/browser/test_admin_accessibility.py); in CI a missing npm fails here.
axe:
	bash scripts/install-axe.sh

# The matrix runs three environments at a time (TOX_PARALLEL), longest first
# (tox.ini's env_list order). Three on two cores, because an environment keeps well
# under a core busy: the py313/dj61 PostgreSQL suite's pytest and worker processes
# used 242 s of CPU over 12 min 16 s (run alone, load average 0.4-4), 33% of a core,
# plus the server's share; the rest is waiting on worker processes, the database and pip. The `docs` environment builds the documentation
# site with warnings as errors and runs its code samples, and the `release`
# environment is the release check (build, wheel installs, smoke suite, install
# instructions: 4-5 minutes, 64 s of CPU, mostly pip). The release check used to run
# beside the matrix at nice 10 (that run took 2,410 s, against 2,134 s before): it
# now takes a slot like any environment, late in env_list. It has its own databases
# (arcature_smoke_3*), so it shares nothing with the other environments. The test
# that restarts PostgreSQL under a running worker restarts the *system* server,
# dropping every client: it runs alone afterwards, and only in CI (CI=true) or when
# asked with ARCATURE_RESTART_DATABASE=1.
RESTART_DATABASE := $(if $(filter true 1 yes,$(CI))$(filter 1,$(ARCATURE_RESTART_DATABASE)),1,)

test: venv databases axe
	rm -rf var/junit var/release-check.log
	mkdir -p var
	export PATH="$$(scripts/python-path.sh):$$PATH"; \
	  $(VENV)/bin/tox run-parallel --parallel $(TOX_PARALLEL) --parallel-no-spinner $(TOX_ARGS); status=$$?; \
	  if [ -n "$(RESTART_DATABASE)" ]; then \
	    ARCATURE_RESTART_DATABASE=1 $(VENV)/bin/tox run -e py313-dj61-postgres -- \
	      -m restarts_server --junitxml=var/junit/py313-dj61-postgres-restart.xml || status=1; \
	  else \
	    echo "(skipped the PostgreSQL restart test: it runs with CI=true or ARCATURE_RESTART_DATABASE=1)"; \
	  fi; \
	  $(PY) scripts/test-summary.py var/junit || status=1; exit $$status

test-quick: venv axe
	ARCATURE_TEST_DB=sqlite $(PY) -m pytest -q

lint: venv
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy django_arcature tests example_project benchmarks

# The release pipeline's build and test steps (.github/workflows/release.yml runs the
# same script): sdist + wheel, twine check --strict, the archives' contents, and the
# smoke suite and the demo against the built wheel in a fresh virtualenv per Python.
release-check: venv
	bash scripts/release-check.sh

docs: venv
	$(VENV)/bin/tox run -e docs

bench: venv databases
	$(PY) -m pip install -q mysqlclient
	$(PY) benchmarks/run.py --db sqlite,postgres,mysql

# Ours beside pgqueuer, Oban, procrastinate, django-tasks-db and Huey on Redis (writes
# benchmarks/peers.md); the peers go into var/peers-venv, never into the project's venv.
bench-peers: venv databases
	$(PY) benchmarks/peers.py --readme

# The long profile of the schedule test: a real one-minute schedule for 3.5 minutes
# across four worker processes (one killed and replaced), on each database; CI runs a
# per-second schedule for 16 s instead (tests/concurrency/test_ops_processes.py).
soak: soak-schedules
soak-schedules: venv databases
	$(PY) -m pip install -q mysqlclient
	for db in sqlite postgres mysql; do \
	  ARCATURE_SOAK=1 ARCATURE_TEST_DB=$$db $(PY) -m pytest -q -s -p no:cacheprovider \
	    tests/concurrency/test_ops_processes.py -k exactly_one || exit 1; \
	done

# --- soak: fleet limits under faults (issue 19) ---------------------------------------------
# More jobs and rounds of cancels, abandoned threads and SIGKILLs (ARCATURE_SOAK=1).
.PHONY: soak-limits
soak: soak-limits
soak-limits: venv databases
	$(PY) -m pip install -q mysqlclient
	for db in sqlite postgres mysql; do \
	  ARCATURE_SOAK=1 ARCATURE_TEST_DB=$$db $(PY) -m pytest -q -s -p no:cacheprovider \
	    tests/limits || exit 1; \
	done

clean:
	rm -rf $(VENV) .tox var build dist *.egg-info

# --- soak: the property-based suites (issue 10) ------------------------------------------
# The manager model and the other tests/properties suites with the long Hypothesis profile
# (ARCATURE_SOAK=1 / HYPOTHESIS_PROFILE=soak, tests/properties/conftest.py), once per
# database; each run prints how many examples and steps it went through. Other long
# profiles join `soak` the same way (a line `soak: soak-yours`).
SOAK_DBS ?= sqlite postgres mysql
soak: soak-properties
soak-properties: venv databases
	$(PY) -m pip install -q mysqlclient
	for db in $(SOAK_DBS); do \
	  ARCATURE_SOAK=1 HYPOTHESIS_PROFILE=soak ARCATURE_TEST_DB=$$db \
	    $(PY) -m pytest -q -p no:cacheprovider tests/properties || exit 1; \
	done

# --- soak: chaos and fault injection (issue 10) --------------------------------------------
# The chaos soak's long profile (ARCATURE_SOAK=1: 20,000 jobs under SIGKILLs and killed
# sessions) and the fault-injection suite with its long profile, once per database.
soak: soak-chaos
soak-chaos: venv databases
	$(PY) -m pip install -q mysqlclient
	for db in $(SOAK_DBS); do \
	  ARCATURE_SOAK=1 ARCATURE_TEST_DB=$$db \
	    $(PY) -m pytest -q -s -p no:cacheprovider tests/chaos tests/faults || exit 1; \
	done

# --- soak: the schedules model and the duties under faults (issue 19) ---------------------
# The stateful model of schedules (edits, ticks of two workers, DST instants, skewed app
# clocks) with its long profile, and the fault injection at every statement of a duty
# with its long profile (every statement of longer programs), once per database.
soak: soak-schedules-model
soak-schedules-model: venv databases
	$(PY) -m pip install -q mysqlclient
	for db in $(SOAK_DBS); do \
	  ARCATURE_SOAK=1 ARCATURE_TEST_DB=$$db $(PY) -m pytest -q -p no:cacheprovider \
	    tests/properties/test_schedules_model.py tests/faults/test_duty_faults.py || exit 1; \
	done

# --- soak: workflows (issue 20) --------------------------------------------------------------
# The claim's plan beside 1,000,000 waiting workflow nodes (CI: 20,000), and the workflow
# chaos soak (random DAGs and batches under SIGKILLs and killed sessions; it prints its
# counts on a "workflow chaos summary" line), once per database. CHAOS_SCALE=N runs N times
# the workflows and batches (1: about 30 s a database; 10: several minutes). The workflow
# model's long profile runs with soak-properties (tests/properties).
CHAOS_SCALE ?= 1
soak: soak-workflows
soak-workflows: venv databases
	$(PY) -m pip install -q mysqlclient
	for db in $(SOAK_DBS); do \
	  ARCATURE_SOAK=1 ARCATURE_CHAOS_SCALE=$(CHAOS_SCALE) ARCATURE_TEST_DB=$$db \
	    $(PY) -m pytest -q -s -p no:cacheprovider tests/integration/test_workflow_plans.py \
	      tests/chaos/test_chaos_workflows.py || exit 1; \
	done
