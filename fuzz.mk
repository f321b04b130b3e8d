# Fuzzing, separate from the build and the test suite (included by the top-level Makefile).
#   make fuzz-safetensors [FUZZ_TIME=60]   libFuzzer + ASan + UBSan on the safetensors reader
# Needs clang with libFuzzer: on Debian the `clang` and `libclang-rt-dev` packages
# (clang-14 and libclang-rt-14-dev on Debian 12), installed here on first use.
# New corpus entries go to $(FUZZ_DIR)/corpus-safetensors; a crash leaves
# $(FUZZ_DIR)/crash-* (rerun: $(FUZZ_DIR)/fuzz_safetensors FILE) and fails the target.
# Wherever this file is included, it leaves the including Makefile's default goal alone.
FUZZ_SAVED_GOAL := $(.DEFAULT_GOAL)
FUZZ_DIR ?= build-fuzz
FUZZ_TIME ?= 60
FUZZ_CC ?= clang
FUZZ_CFLAGS = -std=c11 -g -O1 -Wall -Wextra -D_GNU_SOURCE -Isrc -fno-omit-frame-pointer \
	-fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_LIBS = -lcjson -lxxhash -lm
FUZZ_ST_SOURCES = src/io/safetensors_read.c src/io/safetensors_write.c \
	src/io/safetensors_dtype.c src/io/safetensors_text.c src/core/error.c

.PHONY: fuzz-setup fuzz-safetensors fuzz-clean

# Build packages (cJSON, xxhash), then clang's libFuzzer if a trivial fuzzer does not link.
fuzz-setup:
	@scripts/setup.sh build
	@mkdir -p $(FUZZ_DIR)
	@printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' \
		> $(FUZZ_DIR)/probe.c
	@if ! $(FUZZ_CC) -fsanitize=fuzzer $(FUZZ_DIR)/probe.c -o $(FUZZ_DIR)/probe >/dev/null 2>&1; then \
		echo "fuzz: installing clang and libFuzzer (clang libclang-rt-dev)"; \
		SUDO=""; [ "$$(id -u)" -ne 0 ] && SUDO="sudo"; \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends \
			clang libclang-rt-dev >/dev/null; \
	fi
	@rm -f $(FUZZ_DIR)/probe.c $(FUZZ_DIR)/probe

$(FUZZ_DIR)/fuzz_safetensors: tests/fuzz/fuzz_safetensors.c $(FUZZ_ST_SOURCES) src/io/safetensors.h | fuzz-setup
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer tests/fuzz/fuzz_safetensors.c $(FUZZ_ST_SOURCES) $(FUZZ_LIBS) -o $@

$(FUZZ_DIR)/make_seeds: tests/fuzz/make_seeds.c $(FUZZ_ST_SOURCES) src/io/safetensors.h | fuzz-setup
	$(FUZZ_CC) $(FUZZ_CFLAGS) tests/fuzz/make_seeds.c $(FUZZ_ST_SOURCES) $(FUZZ_LIBS) -o $@

fuzz-safetensors: $(FUZZ_DIR)/fuzz_safetensors $(FUZZ_DIR)/make_seeds
	@rm -rf $(FUZZ_DIR)/seeds-safetensors && mkdir -p $(FUZZ_DIR)/seeds-safetensors $(FUZZ_DIR)/corpus-safetensors
	@$(FUZZ_DIR)/make_seeds $(FUZZ_DIR)/seeds-safetensors
	$(FUZZ_DIR)/fuzz_safetensors -max_total_time=$(FUZZ_TIME) -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
		-dict=tests/fuzz/safetensors.dict -print_final_stats=1 -artifact_prefix=$(FUZZ_DIR)/ \
		$(FUZZ_DIR)/corpus-safetensors $(FUZZ_DIR)/seeds-safetensors

fuzz-clean:
	rm -rf $(FUZZ_DIR)

.DEFAULT_GOAL := $(FUZZ_SAVED_GOAL)
