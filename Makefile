# Two entry points, each setting up what it needs in .venv first:
#   make demo   -- install bertkit and run the demo
#   make test   -- install bertkit with its test extras, lint, run the test suite
#   make docs   -- build the docs site into site/ (mkdocs build --strict); make docs-serve serves it
VENV ?= .venv
PY := $(VENV)/bin/python
# torch first and pinned: 2.13.0 is the CPU wheel; an open range would pull the CUDA build.
TORCH ?= torch==2.13.0

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(VENV)/.demo-installed: pyproject.toml | $(PY)
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e '.[plot,serve]'   # matplotlib: the demo's metrics.png; serve: bertkit serve its model
	touch $@

$(VENV)/.test-installed: pyproject.toml | $(PY)
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e '.[test]'
	# d2l 1.0.3 (a test reference) pins numpy 1.23 in its metadata; its BERT code runs on ours
	$(PY) -m pip install -q --no-deps d2l==1.0.3
	touch $@

# The test extra holds the docs extra: in a .venv that `make test` set up, `make docs` installs nothing (a second
# `pip install -e` would reinstall bertkit under a `make test` running from the same .venv); it only brings that
# install up to date, as `make test` would
ifneq ($(wildcard $(VENV)/.test-installed),)
$(VENV)/.docs-installed: $(VENV)/.test-installed
	touch $@
else
$(VENV)/.docs-installed: pyproject.toml | $(PY)
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e '.[docs]'
	touch $@
endif

.PHONY: demo test test-slow lint bench bench-data docs docs-serve
demo: $(VENV)/.demo-installed
	$(VENV)/bin/bertkit demo

lint: $(VENV)/.test-installed
	$(PY) -m ruff check src tests benchmarks

# one line per test file, its dots as its tests finish and its tests' time at the end (a CI log shows which file
# runs and how long each took); pytest -q gives the plain dots
# one pytest-xdist worker per core, a test file to a worker (its module fixtures are built once): the suite is
# mostly one thread at a time (commands it starts, servers it waits on), so two workers use both cores of a 2-core
# machine; the log ends with the slowest tests' times (xdist prints no line per file)
test: lint
	$(PY) -m pytest -n auto --dist loadfile --durations=25

# the tests marked slow (a recipe's full claim, a benchmark script run whole: 10+ minutes each), which `make test`
# leaves out
test-slow: $(VENV)/.test-installed
	$(PY) -m pytest -o console_output_style=times -m slow

# bertkit vs HF transformers vs ONNX Runtime, one run (~6 min on 2 cores, and the families table, one
# BERT-base-sized model per family: 6.5 min for three families on a loaded machine): benchmarks/run.py;
# one section alone: $(PY) benchmarks/run.py --only families (or inference, pretraining, ...)
bench: $(VENV)/.test-installed
	$(PY) benchmarks/run.py

# bertkit data create vs HF run_mlm.py's datasets recipe, 200 MB of JSONL, 1 and 2 workers (minutes):
# benchmarks/data.py; every run's numbers are appended to runs/bench-data.jsonl
bench-data: $(VENV)/.test-installed
	$(PY) benchmarks/data.py --out runs/bench-data.jsonl

# the docs site (MkDocs Material + mkdocstrings; the reference pages are generated from the code at build time)
docs: $(VENV)/.docs-installed
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

docs-serve: $(VENV)/.docs-installed
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve --dev-addr 127.0.0.1:8000
