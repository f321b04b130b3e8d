# Fuzzing, separate from the build and the test suite (included by the top-level Makefile).
#   make fuzz [FUZZ_TIME=30]            every target in turn, FUZZ_TIME seconds each
#   make fuzz-<target> [FUZZ_TIME=60]   one target: safetensors, config, tokjson, gpt2,
#                                       shard, trainer_json, args, bpe_encode, ckpt_index,
#                                       cluster, blend
# A target is tests/fuzz/fuzz_<target>.c (libFuzzer + ASan + UBSan) over the parsers'
# sources, built here with clang into $(FUZZ_DIR); its seeds are tests/fuzz/<target>/seeds,
# its regression inputs tests/fuzz/<target>/crashes, its dictionary tests/fuzz/<target>.dict
# (all replayed by CTest in `make test` without clang: tests/CMakeLists.txt).
# Needs clang with libFuzzer: on Debian the `clang` and `libclang-rt-dev` packages
# (clang-14 and libclang-rt-14-dev on Debian 12), installed here on first use, never by
# `make test`. New corpus entries go to $(FUZZ_DIR)/corpus-<target>; a crash leaves
# $(FUZZ_DIR)/<target>-crash-* (rerun: $(FUZZ_DIR)/fuzz_<target> FILE; once fixed, keep
# the file in tests/fuzz/<target>/crashes/) and fails the target.
# Wherever this file is included, it leaves the including Makefile's default goal alone.
FUZZ_SAVED_GOAL := $(.DEFAULT_GOAL)
FUZZ_DIR ?= build-fuzz
FUZZ_TIME ?= 30
FUZZ_CC ?= clang
FUZZ_CFLAGS = -std=c11 -g -O1 -Wall -Wextra -D_GNU_SOURCE -Isrc -fno-omit-frame-pointer \
	-fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_LIBS = -lcjson -lxxhash -lm
# The parsers and what they call; a target links only the objects it needs from the archive.
FUZZ_LIB_SOURCES = src/core/error.c src/core/half.c src/core/text_file.c src/core/dtype.c \
	$(wildcard src/data/bpe_*.c) src/data/shard.c $(wildcard src/io/safetensors_*.c) \
	src/model/config.c src/model/params.c src/core/rng.c src/kernels/bf16_path.c src/core/log.c \
	src/train/checkpoint_meta.c src/train/checkpoint_index.c \
	src/train/checkpoint_plan.c src/io/file_sync.c src/plan/cluster.c src/data/blend.c src/core/args.c \
	tests/fuzz/stub_router.c tests/fuzz/stub_trainer.c
FUZZ_OBJS = $(patsubst %.c,$(FUZZ_DIR)/obj/%.o,$(FUZZ_LIB_SOURCES))
FUZZ_TARGETS = $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_ARGS = -max_len=16384 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1

.PHONY: fuzz fuzz-setup fuzz-build fuzz-clean $(addprefix fuzz-,$(FUZZ_TARGETS))

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

$(FUZZ_DIR)/obj/%.o: %.c | fuzz-setup
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(FUZZ_DIR)/libfuzzparsers.a: $(FUZZ_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(FUZZ_DIR)/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_DIR)/libfuzzparsers.a | fuzz-setup
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -MMD -MP $< $(FUZZ_DIR)/libfuzzparsers.a $(FUZZ_LIBS) -o $@

fuzz-build: $(addprefix $(FUZZ_DIR)/fuzz_,$(FUZZ_TARGETS))

# One target for FUZZ_TIME seconds: new inputs into the first (writable) corpus
# directory, the committed seeds and regression inputs read from the others.
$(addprefix fuzz-,$(FUZZ_TARGETS)): fuzz-%: $(FUZZ_DIR)/fuzz_%
	@mkdir -p $(FUZZ_DIR)/corpus-$*
	$(FUZZ_DIR)/fuzz_$* -max_total_time=$(FUZZ_TIME) $(FUZZ_ARGS) \
		$(if $(wildcard tests/fuzz/$*.dict),-dict=tests/fuzz/$*.dict) -artifact_prefix=$(FUZZ_DIR)/$*- \
		$(FUZZ_DIR)/corpus-$* $(wildcard tests/fuzz/$*/seeds tests/fuzz/$*/crashes)

# Every target, one after the other (2 cores are shared: no parallel fuzzing here).
fuzz: fuzz-build
	@for t in $(FUZZ_TARGETS); do $(MAKE) --no-print-directory fuzz-$$t || exit 1; done

fuzz-clean:
	rm -rf $(FUZZ_DIR)

-include $(wildcard $(FUZZ_DIR)/obj/src/*/*.d $(FUZZ_DIR)/*.d)

.DEFAULT_GOAL := $(FUZZ_SAVED_GOAL)
