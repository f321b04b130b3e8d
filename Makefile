# The README's two commands: `make demo` and `make test`. Both set up, configure and build first.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all setup setup-test build demo test bench asan clean

all: build

setup:
	@scripts/setup.sh build

setup-test:
	@scripts/setup.sh test

build: setup
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

demo: build
	@scripts/demo.sh $(BUILD)/bagualu

test: setup-test build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

bench: build
	@bench/run_all.sh $(BUILD)

# ASan + UBSan build and the whole suite under it. OpenMPI leaves its own allocations
# (in plugins it unloads at exit) to the leak checker: tests/lsan_mpi.supp names its
# libraries, and full unwinding lets the checker see them in every stack.
asan: setup-test
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DBG_SANITIZE=ON -DBG_NATIVE=ON >/dev/null
	@cmake --build build-asan -j $(JOBS)
	@cd build-asan && LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan_mpi.supp:fast_unwind_on_malloc=0 \
		ctest --output-on-failure

clean:
	rm -rf $(BUILD) build-asan
include fuzz.mk
