# The README's two commands: `make demo` and `make test`. Both set up, configure and build first.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all setup setup-test build demo test bench asan avx512-emulated avx2 clean

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

# The AVX-512 branches (vec16.h, vecmath.h) on a CPU without AVX-512: the suite in a
# build whose AVX-512 intrinsics are SIMDe's portable ones (tests/simde_avx512.h, on AVX2
# with FMA). For changes to AVX-512 code made on AVX2-only machines. ISA_TESTS: a ctest
# -R pattern (CI runs the kernel and model tests: '^(kernels|model)/').
ISA_TESTS ?= .
# $(call isa_suite,DIR,CFLAGS): the suite built in DIR for CFLAGS instead of this CPU, and
# its ISA_TESTS run.
define isa_suite
	@cmake -S . -B $(1) -DCMAKE_BUILD_TYPE=Release -DBG_NATIVE=OFF -DCMAKE_C_FLAGS="$(2)" >/dev/null
	@cmake --build $(1) -j $(JOBS)
	@cd $(1) && ctest --output-on-failure -j $(JOBS) -R '$(ISA_TESTS)'
endef
avx512-emulated: setup-test
	$(call isa_suite,build-avx512-emulated,-mavx2 -mfma -include $(CURDIR)/tests/simde_avx512.h)

# The AVX2 branches on a CPU with AVX-512, whose native build takes the AVX-512 ones: the
# suite in a build for AVX2 with FMA.
avx2: setup-test
	$(call isa_suite,build-avx2,-mavx2 -mfma)

clean:
	rm -rf $(BUILD) build-asan build-avx512-emulated build-avx2
include fuzz.mk
