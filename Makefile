# The targets README.md names. Every target sets up first; setup is idempotent.
VENV := .venv
BIN := $(VENV)/bin
export DO_NOT_TRACK := 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false

.PHONY: setup demo test bench lint

setup:
	bash scripts/setup.sh

demo: setup
	$(BIN)/python scripts/demo.py

# pytest exits 5 when it collected no test: that is a failure, not a pass.
test: setup
	@$(BIN)/pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc = 5 ]; then echo "make test: pytest ran no test" >&2; exit 1; fi; exit $$rc

bench: setup
	$(BIN)/python benchmarks/run_all.py

lint:
	$(BIN)/ruff check mindforge flows tests benchmarks
