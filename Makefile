# enzcc: `make demo` and `make test` set everything up on a fresh Debian machine.
PYTHON ?= python3
PYTEST_ARGS ?=
BENCH_ARGS ?=

.PHONY: setup demo test bench clean

setup:
	@PYTHON=$(PYTHON) ./scripts/setup.sh

demo: setup
	@$(MAKE) --no-print-directory -C examples/demo run

test: setup
	$(PYTHON) -m pytest -q $(PYTEST_ARGS)

# the benchmark suite (README "Benchmarks"): results in bench/results/results.json
bench: setup
	$(PYTHON) -m bench $(BENCH_ARGS)

clean:
	@$(MAKE) --no-print-directory -C examples/demo clean
	rm -rf .pytest_cache build bench/build bench/results
