# One target per thing a person does. The virtual environment is built on first use.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export DAGSTER_HOME := $(CURDIR)/.kg/dagster

.PHONY: demo ui test lint format bench bench-smoke clean

# setup.py and the C sources too: pip install -e . compiles the reader and the recount scan
# next to their sources
$(STAMP): pyproject.toml setup.py kg_platform/pubmed/_reader.c kg_platform/pubmed/_recount.c
	@command -v $(PYTHON) >/dev/null || { echo "needs $(PYTHON) on PATH"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -U pip wheel
	@echo "installing kg-platform and its dependencies into $(VENV) (about 90 s on 2 idle cores)"
	# pip names each package, then installs them under a bar a terminal shows; into a log or a
	# pipe it shows none, so a line every 15 s counts the packages installed so far
	@if [ ! -t 1 ]; then (n=0; while sleep 15 >/dev/null 2>&1; do n=$$((n + 15)); \
	  echo "  pip: $$(ls -d $(VENV)/lib/python*/site-packages/*.dist-info 2>/dev/null | wc -l) packages in $(VENV) after $$n s"; \
	  done) & ticker=$$!; fi; \
	echo "$(BIN)/pip install --progress-bar on -e '.[ml,test]'"; \
	$(BIN)/pip install --progress-bar on -e '.[ml,test]'; status=$$?; \
	[ -z "$$ticker" ] || kill $$ticker; exit $$status
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)  ## set up and run the main job end to end on the embedded default (.kg/)
	$(BIN)/kg build
	@echo "kg is $(CURDIR)/$(BIN)/kg: run '. $(BIN)/activate' to put it on PATH; from any folder it uses this checkout's .kg (or KG_HOME)"

ui: $(STAMP)  ## the Dagster UI on 127.0.0.1:3000 over the same instance and lake
	mkdir -p $(DAGSTER_HOME)
	# the instance's own dagster.yaml when there is one (kg build's, or Postgres from kg workers)
	test -f $(DAGSTER_HOME)/dagster.yaml || cp dagster.yaml $(DAGSTER_HOME)/dagster.yaml
	# dagster dev = webserver + daemon, so backfills, the update sensor and the schedule run.
	# Started in DAGSTER_HOME: in the checkout it warns that the template dagster.yaml there
	# "will not be used". SIGINT back to its default first: a script that starts `make ui &`
	# starts it with SIGINT ignored, and dagster dev maps SIGTERM onto SIGINT's handler, so it
	# would ignore SIGTERM too
	cd $(DAGSTER_HOME) && exec $(CURDIR)/$(BIN)/python -c 'import os, signal, sys; \
	  signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])' \
	  $(CURDIR)/$(BIN)/dagster dev -h 127.0.0.1 -p 3000 -w $(CURDIR)/workspace.yaml

test: $(STAMP)  ## the whole test suite (CI runs this with CI=true)
	# two workers, a test file per worker at a time (its module fixtures are built once):
	# most of the suite waits on Dagster's run and code-server processes, not on the CPU;
	# files in collection order, the slowest first (kg_platform_tests/conftest.py SLOW_FIRST)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=25

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: $(STAMP)  ## benchmarks print JSON; never part of the tests
	for b in benchmarks/[!_]*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

bench-smoke: $(STAMP)  ## every benchmark at a tiny size (CI runs it): each must end with one JSON line
	$(BIN)/python benchmarks/smoke.py

clean:
	rm -rf .kg
