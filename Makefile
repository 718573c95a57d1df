# Data Scientist Portal: the entry points. Everything runs as root.
DEPLOY := deploy
# The hub's environment, under [envs] prefix of the settings.
ENVS_PREFIX := $(shell /usr/bin/python3 portal/settings.py --get envs.prefix)
PYTHON := $(ENVS_PREFIX)/envs/hub/bin/python
RUFF := $(ENVS_PREFIX)/envs/hub/bin/ruff
JUPYTER_ENV := $(shell /usr/bin/python3 portal/settings.py --get envs.jupyter)

.PHONY: up down purge status accounts restart-hub health load test lint unit bench smoke labextension docs docs-build screenshots

up:            ## install what is missing, start the cluster and the portal on :8000
	@bash $(DEPLOY)/cluster.sh up

down:          ## stop the portal and the cluster, remove the compute nodes' namespaces (data is kept)
	@bash $(DEPLOY)/cluster.sh down

purge:         ## back to a first start: remove what make up and the tests made (packages and envs kept)
	@bash $(DEPLOY)/purge.sh

status:        ## what runs
	@bash $(DEPLOY)/cluster.sh status

accounts:      ## the demo LDAP accounts, as JSON
	@bash $(DEPLOY)/ldap.sh accounts

restart-hub:   ## restart the hub alone; the proxy, Slurm, slapd and sessions keep running
	@bash $(DEPLOY)/hub.sh restart

health:        ## each part of the portal, ok or down (exit 1 naming what is down)
	@$(PYTHON) -m portal.health

load:          ## USERS=N (12) accounts, at once: login, a spawn (queueing), a cell, stop; p50/p95
	@$(PYTHON) -m bench.loadtest --users $(or $(USERS),12)

test:          ## install what the tests need, lint, start the cluster, run every test
	@bash $(DEPLOY)/packages.sh
	@bash $(DEPLOY)/envs.sh
	@bash $(DEPLOY)/testtools.sh
	@$(MAKE) --no-print-directory lint
	@$(MAKE) --no-print-directory docs-build
	@bash $(DEPLOY)/data.sh
	@bash $(DEPLOY)/tls.sh ensure
	@bash $(DEPLOY)/ldap.sh start
	@bash $(DEPLOY)/slurm.sh start
	@bash $(DEPLOY)/mail.sh start
	@$(PYTHON) -m pytest $(PYTEST_ARGS)

docs:          ## the docs site, built strictly into build/docs/ (mkdocs.yml; reference pages made from the code)
	@bash $(DEPLOY)/envs.sh
	@$(MAKE) --no-print-directory docs-build

docs-build:
	@$(PYTHON) -m mkdocs build --strict --config-file mkdocs.yml
	@echo "docs: built into build/docs/ (open build/docs/index.html)"

screenshots:   ## after a browser test run: its shots (test-artifacts/) over the docs' (docs/screenshots/)
	@for f in docs/screenshots/*.png; do n=$$(basename "$$f"); \
	    if [ -f "test-artifacts/$$n" ]; then cp "test-artifacts/$$n" "$$f"; echo "screenshots: $$n"; \
	    else echo "screenshots: $$n kept (no test-artifacts/$$n: run the browser tests)"; fi; done

lint:          ## ruff: lint and format check of the Python code; shellcheck of the shell
	@$(RUFF) check . && $(RUFF) format --check . && shellcheck -x $(DEPLOY)/*.sh .ci/run

unit:          ## the unit tests only (no services)
	@$(PYTHON) -m pytest tests/unit $(PYTEST_ARGS)

# Not part of `test`: it runs for a long while (BENCH_ARGS='--reps 2 --sessions 10'
# for a shorter run). While the Slurm load figures are taken the node advertises
# 100 more GPUs (slurmctld and slurmd restart, and again to put it back).
bench:         ## benchmarks (issue 8): spawn time, Slurm load, hub latency, training, TensorBoard
	@bash $(DEPLOY)/ldap.sh start
	@bash $(DEPLOY)/slurm.sh start
	@$(PYTHON) -m bench $(BENCH_ARGS)

smoke:         ## after an upgrade: each notebook template, briefly, as a Slurm job of a demo user
	@$(PYTHON) $(DEPLOY)/smoke.py $(SMOKE_ARGS)

# Not `npm ci`: the lock lists only the rspack binaries our npm registry has
# (Linux), and ci refuses a lock without every platform's; install keeps it.
labextension:  ## rebuild the TensorBoard JupyterLab extension (portal/session/labextension/, committed) from labextension/
	@cd labextension && npm install --no-audit --no-fund && npm run clean && \
	    PATH=$(JUPYTER_ENV)/bin:$$PATH npm run build
