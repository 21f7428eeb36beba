# One entry point for every routine task. Everything runs inside the uv workspace (.venv).
# Without uv on PATH, the pinned uv is installed from PyPI into .tools/uv first (no other step needed).
UV_VERSION := 0.13.9
UV_LOCAL := .tools/uv/bin/uv
UV ?= $(shell command -v uv 2>/dev/null || echo $(UV_LOCAL))
RUN := $(UV) run --frozen
BASELINE := proto/baseline/agentrunner-v1.0.0.binpb
PYTEST_ARGS ?=
# Generated contract, one tree per language (`make gen` writes them, `make gen-check` compares them).
GENERATED := sdk_python/src/agentrunner/v1 sdk_go/agentrunnerv1 sdk_ts/src/gen
TS_DEPS := sdk_ts/node_modules/.package-lock.json

.PHONY: help sync gen gen-check lint format breaking baseline test test-py test-go test-ts conformance release-check sdk-lowest soak demo demo-services demo-claude demo-codex demo-acp bench bench-scale bench-wakeups bench-peers clean

help: ## List targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

$(UV_LOCAL):
	@echo "uv not found: installing uv $(UV_VERSION) from PyPI into .tools/uv"
	@python3 -m venv .tools/uv || { echo "python3 -m venv failed: install Python 3.11 with venv support" >&2; exit 1; }
	@.tools/uv/bin/python -m pip install --quiet --disable-pip-version-check "uv==$(UV_VERSION)"
	@$(UV_LOCAL) --version

sync: $(if $(filter $(UV_LOCAL),$(UV)),$(UV_LOCAL)) ## Install the workspace and dev tools into .venv
	$(UV) sync --frozen

gen: sync $(TS_DEPS) ## Regenerate the contract for Python, Go and TypeScript from proto/ (local plugins only)
	$(RUN) python tools/gen.py

gen-check: gen ## Fail when the committed generated code (any language) is stale
	@git diff --exit-code --stat -- $(GENERATED) || \
	  (echo "generated code is stale: run 'make gen' and commit" >&2; exit 1)
	@test -z "$$(git status --porcelain -- $(GENERATED))" || \
	  (git status --porcelain -- $(GENERATED); echo "untracked generated files: run 'make gen' and commit" >&2; exit 1)

$(TS_DEPS): sdk_ts/package-lock.json
	cd sdk_ts && npm ci --no-audit --no-fund --loglevel=error

lint: sync ## buf lint + buf format check + ruff (with a complexity ceiling) + mypy (strict) + import layers + function length + duplicate blocks + gofmt
	$(RUN) buf lint
	$(RUN) buf format -d --exit-code
	$(RUN) ruff check .
	$(RUN) ruff format --check .
	$(RUN) mypy
	$(RUN) lint-imports
	$(RUN) python tools/function_length.py
	$(RUN) python tools/duplicates.py
	@test -z "$$(gofmt -l sdk_go)" || (gofmt -l sdk_go; echo "Go code is not gofmt-formatted: run 'gofmt -w sdk_go'" >&2; exit 1)

format: sync ## Rewrite protos and Python in place
	$(RUN) buf format -w
	$(RUN) ruff format .
	$(RUN) ruff check --fix .

breaking: sync ## buf breaking against the released v1.0.0 image
	$(RUN) buf breaking --against $(BASELINE)

baseline: sync ## Cut a new release baseline image (a release step; commit the result)
	$(RUN) buf build --exclude-source-info -o $(BASELINE)

test: test-py test-go test-ts conformance ## Run every test: Python, Go and TypeScript, then both conformance kits

test-py: sync ## Python tests (starts a throwaway PostgreSQL when its binaries are installed)
	$(RUN) pytest -n 2 --dist loadfile $(PYTEST_ARGS)

test-go: ## Go runner kit tests (sdk_go; modules from the Go module proxy)
	cd sdk_go && go vet ./... && go test ./...

test-ts: $(TS_DEPS) ## TypeScript runner kit tests (sdk_ts; packages from the npm registry)
	cd sdk_ts && npm test --silent
release-check: sync $(TS_DEPS) ## Build every release artifact; install each in a clean temp dir (README steps, host wheel)
	$(RUN) python tools/release_check.py

sdk-lowest: sync ## The SDK's suites against the lowest versions its dependency bounds allow (uv lowest-direct)
	$(RUN) python tools/sdk_lowest.py

soak: sync ## The long hardening matrix (tests/hardening at soak scale), with its figures
	@rm -f .soak-report.jsonl
	AGENTRUNNER_SOAK=1 AGENTRUNNER_HARDENING_REPORT=$(CURDIR)/.soak-report.jsonl \
	  $(RUN) pytest tests/hardening -n 2 --dist loadfile --timeout 3600 $(PYTEST_ARGS)
	$(RUN) python tools/hardening_report.py .soak-report.jsonl

conformance: sync $(TS_DEPS) ## Conformance kits: runner kit vs the Python, Go, TS runners; host kit vs our host
	$(RUN) python tools/conformance.py

demo: sync ## The main job: host on SQLite + reference runner, a scripted conversation
	$(RUN) python -m agentrunner_host.demos.conversation

demo-services: sync ## One turn through each external-service runner (Dify, n8n, ...) against local mocks
	$(RUN) python -m agentrunner_host.demos.services

demo-claude: sync ## The claude-code runner through the host (the real `claude` against a local API mock if installed, else the bundled fake)
	PATH="$(CURDIR)/.tools/real/claude/node_modules/.bin:$$PATH" $(RUN) python -m agentrunner_host.demos.harness claude

demo-codex: sync ## The codex runner through the host (the real `codex` against a local model-API mock if installed, else the bundled fake)
	PATH="$(CURDIR)/.tools/real/codex/node_modules/.bin:$$PATH" $(RUN) python -m agentrunner_host.demos.harness codex

demo-acp: sync ## The acp runner through the host (the real `claude-agent-acp` against a local API mock if installed, else the bundled scripted ACP agent)
	PATH="$(CURDIR)/.tools/real/claude_acp/node_modules/.bin:$$PATH" $(RUN) python -m agentrunner_host.demos.harness acp

bench: sync ## Benchmarks: host path vs bare relay, history paging, knowledge, LangBot bridge vs native, the peers (bench-peers), footprint at scale (BENCH_SCALE_FAST=1: 1k open runs only; FAST=1: the peers' quick counts); writes bench/results*.json
	$(RUN) python bench/run_all.py

bench-wakeups: sync ## Wake-ups per run of client, host and runner by thread, host CPU per run, idle host wake-ups per second (issue 37)
	cd bench && $(RUN) python bench_wakeups.py

bench-scale: sync ## Per-run cost and footprint alone (issue 37): open runs, RSS per open run, idle RSS, start, streaming high-water; `make bench-scale FAST=1` for the quick one
	cd bench && $(RUN) python bench_scale.py $(if $(FAST),--fast)

bench-peers: sync ## This host vs the LangBot plugin runtime 0.7.18 and the A2A SDK 1.3.0 (gRPC) on one echo workload, ratios on one line (~10 min at load 20-40; `make bench-peers FAST=1` ~2 min); the A2A venv is installed on first use
	$(RUN) python bench/bench_peers.py $(if $(FAST),--fast)

clean: ## Remove generated scratch and local state
	rm -rf .gen var .pytest_cache sdk_ts/dist .tools
