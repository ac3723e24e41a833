# Two commands on a fresh machine: `make run` and `make test`.
# The venv is built from an interpreter every trial user can run: trials run as unprivileged
# Unix users (never the agent's root), and a Python under /root (mode 0700, as pyenv's is) is out
# of their reach. Debian's /usr/bin/python3 when it is there, else the python3 on PATH.
PYTHON ?= $(shell test -x /usr/bin/python3 && /usr/bin/python3 -c 'import venv' 2>/dev/null \
	&& echo /usr/bin/python3 || echo python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
DET_VENV := .venv-det
DET_STAMP := $(DET_VENV)/.installed-stamp
# torch is pinned at install time to the CPU build that lies on this machine's disk;
# pyproject keeps a range (torch>=2.3) for real users.
TORCH_PIN := torch==2.13.0

.PHONY: slurm-packages postgres-packages run serve test test-fast lint bench bench-search bench-scale bench-restart bench-start clean

$(STAMP): pyproject.toml setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q $(TORCH_PIN) numpy
	$(PY) -m pip install -q -e '.[test]' $(TORCH_PIN)
	touch $(STAMP)

# The real determined==0.38.1 client, in its own venv (its pins clash with ours), with torch and
# tensorboard as in Determined's images: trials run the real package with this Python too.
$(DET_STAMP): Makefile
	test -x $(DET_VENV)/bin/python || $(PYTHON) -m venv $(DET_VENV)
	$(DET_VENV)/bin/python -m pip install -q determined==0.38.1 $(TORCH_PIN) tensorboard
	touch $(DET_STAMP)

run: $(STAMP)
	$(VENV)/bin/dettui

serve: $(STAMP)
	$(VENV)/bin/dettui serve

# The Slurm tests start a throwaway Slurm from Debian's packages: installed here when missing and
# we are root (elsewhere those tests skip, naming the packages).
SLURM_PACKAGES := slurmctld slurmd munge slurm-client

slurm-packages:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	    ! dpkg -s $(SLURM_PACKAGES) >/dev/null 2>&1; then \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(SLURM_PACKAGES) >/dev/null || \
	  { apt-get update -q >/dev/null && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(SLURM_PACKAGES) >/dev/null; } || \
	  echo "could not install $(SLURM_PACKAGES): the Slurm tests will skip"; fi

# The master's tests run on PostgreSQL too, against a throwaway server they start from Debian's
# package: installed here when missing and we are root (elsewhere that leg skips, naming it).
PG_PACKAGES := postgresql

postgres-packages:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	    ! dpkg -s $(PG_PACKAGES) >/dev/null 2>&1; then \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(PG_PACKAGES) >/dev/null || \
	  { apt-get update -q >/dev/null && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(PG_PACKAGES) >/dev/null; } || \
	  echo "could not install $(PG_PACKAGES): the PostgreSQL tests will skip"; fi

# Two workers (pytest-xdist): most tests wait on real processes; each worker marks its own
# processes (tests/conftest.py RUN) and one Slurm runs at a time (xdist_group "slurm").
test: $(STAMP) $(DET_STAMP) slurm-packages postgres-packages
	DETTUI_DET_VENV=$(CURDIR)/$(DET_VENV) $(PY) -m pytest -q -p no:cacheprovider --durations=25 \
	  -n 2 --dist loadgroup $(PYTEST_ARGS)

# The inner loop: the pure parts and the master in-process on SQLite (no agents, no terminals),
# under 3 min. -k leaves out the [postgres] legs (test names say "postgresql"); test_pg_store's
# few PostgreSQL-only tests still run where PostgreSQL is installed.
test-fast: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider --durations=10 -n 2 -x \
	  -k "not postgres or postgresql" tests/unit tests/master

lint: $(STAMP)
	$(VENV)/bin/ruff check dettui tests
	$(VENV)/bin/lint-imports

BENCH_VENV := .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed-stamp

bench: $(STAMP)
	$(PY) bench/submit_latency.py
	$(PY) bench/restart_latency.py
	$(PY) bench/scheduler.py
	$(PY) bench/launcher_teardown.py
	$(PY) bench/checkpoint.py
	$(PY) bench/checkpoint_download.py
	$(PY) bench/tui.py
	$(MAKE) --no-print-directory bench-search

# Ray Tune only for the comparison, in its own venv: never in .venv or the test suite.
$(BENCH_STAMP): pyproject.toml
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install -q 'ray[tune]==2.60.0' $(TORCH_PIN)
	$(BENCH_VENV)/bin/python -m pip install -q -e . $(TORCH_PIN)
	touch $(BENCH_STAMP)

bench-search: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python bench/search_throughput.py

# A torch trial preempted and resumed, forked from the fork server and fresh.
bench-restart: $(STAMP)
	$(PY) bench/restart_latency.py

# Issue 34's three figures, each with its trials forked and fresh side by side: search
# throughput (with Ray Tune), a torch script's first metric after create, restart after preemption.
bench-start: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python bench/search_throughput.py
	$(PY) bench/submit_latency.py
	$(PY) bench/restart_latency.py

# MLflow's tracking server only for the ingest comparison, in its own venv like Ray Tune.
MLFLOW_VENV := bench/.venv-mlflow
MLFLOW_STAMP := $(MLFLOW_VENV)/.installed-stamp
MLFLOW_PIN := mlflow==3.17.2

$(MLFLOW_STAMP):
	test -x $(MLFLOW_VENV)/bin/python || $(PYTHON) -m venv $(MLFLOW_VENV)
	$(MLFLOW_VENV)/bin/python -m pip install -q $(MLFLOW_PIN)
	touch $(MLFLOW_STAMP)

# The master at lab scale (issue 13), never in `make test`: SCALE=0.1 for a run of a few
# minutes (every size times SCALE), SCALE_ARGS for more options (bench/scale.py --help).
SCALE ?= 1
bench-scale: $(STAMP)
	$(MAKE) --no-print-directory $(MLFLOW_STAMP) || echo "bench-scale: mlflow could not be installed from PyPI; the run says so and goes on without it"
	$(PY) bench/scale.py --scale $(SCALE) $(SCALE_ARGS)

clean:
	rm -rf $(VENV) $(DET_VENV) $(BENCH_VENV) $(MLFLOW_VENV)
