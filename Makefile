# enzcc: `make demo` and `make test` set everything up on a fresh Debian machine.
PYTHON ?= python3
PYTEST_ARGS ?=
BENCH_ARGS ?=
# make fuzz: N programs per -O level, seed SEED, levels O (docs/testing.md)
N ?= 200
SEED ?= 1
O ?= 0,1,2,3
FUZZ_ARGS ?=

.PHONY: setup demo test test-libraries bench bench-parallel bench-builds bench-cargo bench-frameworks bench-gpu bench-libraries fuzz fuzz-bad clean

setup:
	@PYTHON=$(PYTHON) ./scripts/setup.sh

demo: setup
	@$(MAKE) --no-print-directory -C examples/demo run

test: setup
	$(PYTHON) -m pytest -q $(PYTEST_ARGS)

# gradients through real C libraries fetched from the package registries (docs/testing.md, "Real libraries"):
# make test runs them too, with one REBOUND build (-O2); this adds REBOUND's -O0 and full-driver builds
test-libraries: setup
	ENZCC_TEST_REBOUND=1 $(PYTHON) -m pytest -q tests/libraries $(PYTEST_ARGS)

# the benchmark suite (docs/benchmarks.md): results in bench/results/results.json
bench: setup
	$(PYTHON) -m bench $(BENCH_ARGS)

# the GPU benchmarks (docs/benchmarks.md, "GPU"): built here, run where an NVIDIA GPU is; results in
# bench/results/gpu.json
bench-gpu: setup
	$(PYTHON) -m bench.gpu $(BENCH_ARGS)

# the heat equation with OpenMP threads and MPI ranks, 1 and 2 timed, 4 checked (docs/benchmarks.md, "Threads and
# ranks"): results in bench/results/parallel.json
bench-parallel: setup
	$(PYTHON) -m bench.parallel $(BENCH_ARGS)

# compile-time benchmarks against clang-22 (docs/benchmarks.md, "Compile time"): results in bench/results/builds.json
bench-builds: setup
	$(PYTHON) -m bench.builds $(BENCH_ARGS)

# cargo with RUSTC_WRAPPER=enzcc against cargo alone (docs/benchmarks.md, "cargo"): results in bench/results/cargo.json
bench-cargo: setup
	$(PYTHON) -m bench.cargo $(BENCH_ARGS)

# the framework plugins against Enzyme-JAX and each framework's own ops (docs/benchmarks.md, "Frameworks"):
# results in bench/results/frameworks.json
bench-frameworks: setup
	$(PYTHON) -m bench.frameworks $(BENCH_ARGS)

# real C libraries' primal and gradient times (docs/benchmarks.md, "Real libraries"): results in
# bench/results/libraries.json
bench-libraries: setup
	$(PYTHON) -m bench.libraries $(BENCH_ARGS)

# random self-checking programs through enzcc at each -O level: counts per class, reduced failures in build/fuzz
fuzz: setup
	$(PYTHON) -m tests.fuzz --n $(N) --seed $(SEED) --opt $(O) $(FUZZ_ARGS)

# mutated C and LLVM IR into enzcc: never a traceback, an LLVM abort or a half-written output
fuzz-bad: setup
	$(PYTHON) -m tests.fuzz.badinput --n $(N) --seed $(SEED)

clean:
	@$(MAKE) --no-print-directory -C examples/demo clean
	rm -rf .pytest_cache build bench/build bench/results
