# The targets README.md names. Every target sets up first; setup is idempotent.
VENV := .venv
BIN := $(VENV)/bin
export DO_NOT_TRACK := 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false

.PHONY: setup demo efficacy test test-acceptance bench lint

# Full-size acceptance runs take tens of minutes on two CPU cores; `make test` leaves them out.
PYTEST_ARGS ?= -m "not acceptance"

# `make setup VLLM=1` also installs vLLM's CPU build into .venv-vllm (scripts/setup_vllm.sh).
VLLM ?=
setup:
	VLLM=$(VLLM) bash scripts/setup.sh

demo: setup
	$(BIN)/python scripts/demo.py

# pytest exits 5 when it collected no test: that is a failure, not a pass.
# Three cycles with the sealed MBPP eval before and after each (64 minutes measured on two cores); a rerun
# resumes the run, a finished run only prints its status.
RUN ?= runs/efficacy
efficacy: setup
	$(BIN)/python scripts/demo.py --deployment efficacy --run-dir $(RUN) --complete --status

test: setup
	@$(BIN)/pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc = 5 ]; then echo "make test: pytest ran no test" >&2; exit 1; fi; exit $$rc

test-acceptance: setup
	$(BIN)/pytest -m acceptance

bench: setup
	$(BIN)/python benchmarks/run_all.py

lint:
	$(BIN)/ruff check mindforge tests benchmarks
