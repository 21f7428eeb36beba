# One entry point for every routine task. Everything runs inside the uv workspace (.venv).
UV ?= uv
RUN := $(UV) run --frozen
BASELINE := proto/baseline/agentrunner-v1.0.0.binpb
PYTEST_ARGS ?=

.PHONY: help sync gen gen-check lint format breaking baseline test test-fast demo bench clean

help: ## List targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

sync: ## Install the workspace and dev tools into .venv
	$(UV) sync --frozen

gen: sync ## Regenerate Python from proto/ (offline: buf + grpcio-tools)
	$(RUN) python tools/gen.py

gen-check: gen ## Fail when the committed generated code is stale
	@git diff --exit-code --stat -- sdk_python/src/agentrunner/v1 || \
	  (echo "generated code is stale: run 'make gen' and commit" >&2; exit 1)
	@test -z "$$(git status --porcelain -- sdk_python/src/agentrunner/v1)" || \
	  (git status --porcelain -- sdk_python/src/agentrunner/v1; echo "untracked generated files: run 'make gen' and commit" >&2; exit 1)

lint: sync ## buf lint + buf format check + ruff
	$(RUN) buf lint
	$(RUN) buf format -d --exit-code
	$(RUN) ruff check .
	$(RUN) ruff format --check .

format: sync ## Rewrite protos and Python in place
	$(RUN) buf format -w
	$(RUN) ruff format .
	$(RUN) ruff check --fix .

breaking: sync ## buf breaking against the released v1.0.0 image
	$(RUN) buf breaking --against $(BASELINE)

baseline: sync ## Cut a new release baseline image (a release step; commit the result)
	$(RUN) buf build --exclude-source-info -o $(BASELINE)

test: sync ## Run every test (starts a throwaway PostgreSQL when its binaries are installed)
	$(RUN) pytest -n 2 --dist loadfile $(PYTEST_ARGS)

demo: sync ## The main job: host on SQLite + reference runner, a scripted conversation
	$(RUN) python -m agentrunner_host.demo

bench: sync ## Benchmarks: host path vs bare relay, history paging; writes bench/results.json
	$(RUN) python bench/run_all.py

clean: ## Remove generated scratch and local state
	rm -rf .gen var .pytest_cache
