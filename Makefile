# longtail — build, test, run.
#
#   make            build bin/longtail (installs missing Debian packages first, as root)
#   make run        the main job: configs/default.json on this machine
#   make test       the default test suite
#   make test-asan  the same suite under AddressSanitizer + UBSan
#   make fuzz       libFuzzer targets, FUZZ_SECONDS each (default 60)
#   make bench      benchmarks against their baselines (bench/results.json)
#   make chaos      fault injection against real processes, CHAOS_SECONDS per scenario (docs/reliability.md)
#   make soak       SOAK_WORKERS scripted workers x 8 slots for SOAK_SECONDS against one daemon
#   make retrain-check  the default job, then `longtail retrain` of it: every step bit-identical (docs/replay.md)
#   make weights-bench  publish-to-last-worker time and daemon bytes, four ways of sending weights (root)
#   make scale-swe  SCALE_SWE_ROOTS (1,000) task roots at once, idle shells in each: memory, fds, latency, leaks
#   make swe-images the swe-mini task image from Debian's packages (mmdebstrap, root), an OCI layout (docs/swe.md)
#   make swe-check  swe-mini's tasks validated in that image: every gold patch resolves, no task resolves unpatched
#   make deps       install the Debian packages the build needs
#   make lint       the layering rule of docs/architecture.md's folder table, and FORMAT_FILES against .clang-format
#   make format     rewrites FORMAT_FILES with clang-format
#
#   make test-gpu   CUDA kernels and the whole model against the CPU reference (needs a GPU)
#   make bench-gpu  GPU training throughput and MFU next to cuBLAS, a device copy and PyTorch (bench/gpu-results.json)
#
# Variables: CUDA=auto|0|1 (auto builds the CUDA learner when nvcc and a GPU are found),
# WERROR=1 (warnings are errors), V=1 (show commands).

VERSION := 0.1.0
LAYERS  := util proto net buffer text learner infer sandbox envs train rewards rollout ui orchestrator cli
PKGS    := libzmq libuv libcjson sqlite3 libcurl libseccomp openblas libsodium ompi-c libpcre2-8 libutf8proc libzstd libarchive

VARIANT ?= release
CUDA    ?= auto
WERROR  ?= 0
FUZZ_SECONDS ?= 60

ifeq ($(V),1)
Q :=
else
Q := @
endif

# ---- toolchain and flags -------------------------------------------------------------

CC      ?= cc
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CFLAGS_BASE = -std=c11 -D_GNU_SOURCE -g -Wall -Wextra -Wshadow -Wno-unused-parameter -Wno-format-truncation -fno-strict-aliasing \
               -I. -I$(BUILD) -MMD -MP
ifeq ($(WERROR),1)
CFLAGS_BASE += -Werror
endif

ifeq ($(VARIANT),asan)
OPT     := -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
LDSAN   := -fsanitize=address,undefined
CUDA    := 0
else ifeq ($(VARIANT),fuzz)
CC      := clang
OPT     := -O1 -fno-omit-frame-pointer -fsanitize=address,undefined,fuzzer-no-link -DLT_FUZZING -Wno-unknown-warning-option
LDSAN   := -fsanitize=address,undefined
CUDA    := 0
else
OPT     := -O2 -march=native
LDSAN   :=
endif

# ---- CUDA ----------------------------------------------------------------------------

NVCC := $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
CU_SRC := $(wildcard learner/cuda/*.cu)
ifeq ($(CUDA),1)
ifeq ($(NVCC),)
$(error CUDA=1 but nvcc was not found)
endif
USE_CUDA := 1
else ifeq ($(CUDA),auto)
# auto: only where a GPU answers, so a machine with the toolkit but no GPU builds the CPU learner.
HAVE_GPU := $(if $(NVCC),$(shell nvidia-smi -L >/dev/null 2>&1 && echo 1))
USE_CUDA := $(if $(and $(NVCC),$(CU_SRC),$(HAVE_GPU)),1,0)
else
USE_CUDA := 0
endif

# A CUDA build keeps its objects apart (the C files see LT_HAVE_CUDA), one tree per set of architectures.
CUDA_ARCHS ?= 80 90
empty :=
BUILD   := build/$(VARIANT)$(if $(filter 1,$(USE_CUDA)),-cuda-sm$(subst $(empty) $(empty),_,$(strip $(CUDA_ARCHS))))

ifeq ($(USE_CUDA),1)
CUDA_HOME  := $(patsubst %/bin/nvcc,%,$(NVCC))
NVCC_FLAGS := -O3 -std=c++17 -I. -I$(BUILD) -Xcompiler -Wall,-Wextra,-fPIC --expt-relaxed-constexpr \
              $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) -MMD -MP \
              -DLT_CUDA_ARCHS='"$(CUDA_ARCHS)"'
ifeq ($(WERROR),1)
NVCC_FLAGS += -Werror all-warnings
endif
CUDA_DEFS  := -DLT_HAVE_CUDA
# learner/dist.c calls NCCL and the CUDA runtime from C.
CUDA_INC   := -I$(CUDA_HOME)/include
CUDA_LIBS  := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lcublas -lcublasLt -lnccl -lstdc++
CU_OBJ     := $(CU_SRC:%.cu=$(BUILD)/obj/%.o)
else
CUDA_DEFS  :=
CUDA_INC   :=
CUDA_LIBS  :=
CU_OBJ     :=
endif

CFLAGS  := $(CFLAGS_BASE) $(OPT) $(CUDA_DEFS) $(CUDA_INC) $(PKG_CFLAGS) $(EXTRA_CFLAGS)
LDLIBS  := $(CUDA_LIBS) $(PKG_LIBS) -lm -lpthread -ldl

# ---- sources -------------------------------------------------------------------------

LIB_SRC  := $(filter-out cli/main.c,$(foreach d,$(LAYERS),$(wildcard $(d)/*.c)))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(CU_OBJ)
LIB      := $(BUILD)/liblongtail.a
MAIN_OBJ := $(BUILD)/obj/cli/main.o
ifeq ($(VARIANT),release)
BIN      := bin/longtail
else
BIN      := $(BUILD)/bin/longtail
endif
TEST_SRC := $(wildcard tests/unit/*.c tests/integ/*.c tests/support/*.c)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/obj/%.o)
TEST_BIN := $(BUILD)/tests/longtail-tests
BENCH_SRC := $(wildcard bench/*.c)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)
FUZZ_SRC := $(wildcard tests/fuzz/*.c)
FUZZ_BIN := $(FUZZ_SRC:tests/fuzz/%.c=build/fuzz/%)

.PHONY: all build run test test-asan test-build fuzz fuzz-build bench bench-build clean deps check-deps docs lint format \
        test-gpu bench-gpu gpu-need gpu-build gpu-interop chaos soak scale scale-swe swe-images swe-check retrain-check \
        weights-bench FORCE
.DEFAULT_GOAL := all

# The public targets check the Debian packages first, then build in a sub-make so that
# pkg-config flags are read after any install.
all: check-deps
	$(Q)$(MAKE) --no-print-directory build

check-deps:
	$(Q)scripts/deps.sh check >/dev/null || scripts/deps.sh install

deps:
	$(Q)scripts/deps.sh install

build: $(BIN)

# bin/longtail is either flavour (CPU or CUDA learner): relink when the flavour changes.
FLAVOUR := $(dir $(BIN)).flavour
$(FLAVOUR): FORCE
	@mkdir -p $(dir $@)
	$(Q)echo "$(BUILD)" > $@.tmp; cmp -s $@.tmp $@ && rm -f $@.tmp || mv $@.tmp $@

$(BIN): $(MAIN_OBJ) $(LIB) $(FLAVOUR)
	@mkdir -p $(dir $@)
	@echo "  LINK    $@"
	$(Q)$(CC) $(LDSAN) -o $@ $(MAIN_OBJ) $(LIB) $(LDLIBS)

$(LIB): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	@echo "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $(LIB_OBJ)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS) -c $< -o $@

# The console's assets go into this object by .incbin, which the compiler's dependency files do not see.
$(BUILD)/obj/ui/assets.o: $(wildcard ui/assets/*)

$(BUILD)/obj/%.o: %.cu
	@mkdir -p $(dir $@)
	@echo "  NVCC    $<"
	$(Q)$(NVCC) $(NVCC_FLAGS) $(CUDA_DEFS) -c $< -o $@

# build_info.h changes only when the version or the commit does, so a commit does not
# rebuild everything.
$(BUILD)/build_info.h: FORCE
	@mkdir -p $(dir $@)
	$(Q)c=$$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown); \
	git diff --quiet HEAD 2>/dev/null || c="$$c-dirty"; \
	printf '#define LT_VERSION "%s"\n#define LT_GIT_COMMIT "%s"\n' "$(VERSION)" "$$c" > $@.tmp; \
	cmp -s $@.tmp $@ && rm -f $@.tmp || mv $@.tmp $@
$(BUILD)/obj/cli/version.o: $(BUILD)/build_info.h

# ---- tests ---------------------------------------------------------------------------

$(TEST_BIN): $(TEST_OBJ) $(LIB)
	@mkdir -p $(dir $@)
	@echo "  LINK    $@"
	$(Q)$(CC) $(LDSAN) -o $@ $(TEST_OBJ) $(LIB) $(LDLIBS) -lcriterion

test-build: $(BIN) $(TEST_BIN)

# TEST_JOBS: parallel test processes; TEST_FILTER: a Criterion glob (e.g. 'proto/*').
TEST_JOBS ?= 2
TEST_ARGS  = --jobs $(TEST_JOBS) $(if $(TEST_FILTER),--filter '$(TEST_FILTER)')
test: check-deps
	$(Q)$(MAKE) --no-print-directory test-build
	$(Q)LT_BIN=$(abspath $(BIN)) LT_ROOT=$(CURDIR) $(TEST_BIN) $(TEST_ARGS)

# exitcode=23: a sanitizer's exit is no longer mistaken for a command's own codes (1-7, util/error.h), so a test
# that expects a child to fail still sees its leak.  A leak in the test's own process is reported when that
# process exits; tests/support/exitcheck.c fails the test.
test-asan: check-deps
	$(Q)$(MAKE) --no-print-directory VARIANT=asan test-build
	$(Q)ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1:exitcode=23 UBSAN_OPTIONS=print_stacktrace=1 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	  LT_BIN=$(abspath build/asan/bin/longtail) LT_ROOT=$(CURDIR) LT_ASAN=1 \
	  build/asan/tests/longtail-tests $(TEST_ARGS)

# ---- GPU: parity tests and benchmarks ---------------------------------------------------
# They link only the learner and util layers (cJSON, OpenBLAS, CUDA), so a GPU machine
# without the daemon's libraries can build them (scripts/gpu-check.sh).

GPU_LIB_OBJ := $(filter $(BUILD)/obj/learner/% $(BUILD)/obj/util/%,$(LIB_OBJ))
GPU_LIB     := $(BUILD)/liblongtail-learner.a
GPU_LDLIBS  := $(CUDA_LIBS) $(or $(shell pkg-config --libs libcjson openblas libsodium ompi-c 2>/dev/null),-lcjson -lopenblas -lsodium -lmpi) -lm -lpthread -ldl
GPU_TEST    := $(BUILD)/tests/longtail-gpu-tests
GPU_BENCH   := $(BUILD)/bench/gpu
GPU_INTEROP := $(BUILD)/tests/longtail-interop
PYTHON      ?= python3

$(GPU_LIB): $(GPU_LIB_OBJ)
	@mkdir -p $(dir $@)
	@echo "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $(GPU_LIB_OBJ)

$(GPU_TEST): tests/gpu/test_gpu.c $(GPU_LIB)
	@mkdir -p $(dir $@)
	@echo "  LINK    $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $< $(GPU_LIB) $(GPU_LDLIBS)

$(GPU_BENCH): bench/gpu/bench_gpu.c $(GPU_LIB)
	@mkdir -p $(dir $@)
	@echo "  LINK    $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $< $(GPU_LIB) $(GPU_LDLIBS)

# The checkpoint and log-probabilities side of the transformers check (CPU only: any build).
$(GPU_INTEROP): tests/gpu/interop.c $(GPU_LIB)
	@mkdir -p $(dir $@)
	@echo "  LINK    $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $< $(GPU_LIB) $(GPU_LDLIBS)

gpu-interop: $(GPU_INTEROP)

gpu-need:
ifneq ($(USE_CUDA),1)
	$(error this target needs the CUDA learner: nvcc and a GPU (or CUDA=1 to build without running))
endif

gpu-build: gpu-need $(GPU_TEST) $(GPU_BENCH) $(GPU_INTEROP)

test-gpu: gpu-need $(GPU_TEST)
	$(Q)LT_ROOT=$(CURDIR) $(GPU_TEST)

# The CUDA learner's rates, then the same batches trained by PyTorch (transformers) in the same run.
bench-gpu: gpu-need $(GPU_BENCH)
	$(Q)LT_ROOT=$(CURDIR) $(GPU_BENCH) bench/gpu-results.json
	$(Q)$(PYTHON) bench/gpu/torch_train.py --merge bench/gpu-results.json

# ---- fuzzing -------------------------------------------------------------------------

# FORCE: the library may have changed, and only the sub-make knows (a fuzzer must test the current code).
build/fuzz/%: tests/fuzz/%.c FORCE
	$(Q)$(MAKE) --no-print-directory VARIANT=fuzz build/fuzz/liblongtail.a
	@echo "  FUZZ    $@"
	$(Q)clang -std=c11 -D_GNU_SOURCE -g -O1 -I. -Ibuild/fuzz -fsanitize=address,undefined,fuzzer -DLT_FUZZING \
	  $(PKG_CFLAGS) -o $@ $< build/fuzz/liblongtail.a $(PKG_LIBS) -lm -lpthread -ldl

fuzz-build: check-deps
	$(Q)$(MAKE) --no-print-directory $(FUZZ_BIN)

# Each target runs FUZZ_SECONDS on a copy of its seed corpus; a crash, leak or sanitizer
# report fails the target and leaves the reproducer in build/fuzz/artifacts/.
fuzz: fuzz-build
	$(Q)scripts/fuzz.sh $(FUZZ_SECONDS) $(FUZZ_BIN)

# ---- chaos and soak ------------------------------------------------------------------

CHAOS_SECONDS ?= 60
SOAK_SECONDS  ?= 600
SOAK_WORKERS  ?= 64
chaos: all
	$(Q)CHAOS_SECONDS=$(CHAOS_SECONDS) LT_BIN=$(abspath $(BIN)) scripts/chaos.sh $(CHAOS)

soak: all
	$(Q)SOAK_SECONDS=$(SOAK_SECONDS) SOAK_WORKERS=$(SOAK_WORKERS) LT_BIN=$(abspath $(BIN)) scripts/soak.sh

# The default job retrained bit for bit (docs/replay.md); RETRAIN_RUN=DIR retrains an existing run instead.
retrain-check: all
	$(Q)LT_BIN=$(abspath $(BIN)) RETRAIN_RUN=$(RETRAIN_RUN) scripts/retrain-check.sh

# Many sessions on one daemon (docs/benchmarks.md, "Scale"): SCALE_WORKERS x SCALE_SLOTS scripted sessions.
SCALE_WORKERS ?= 40
SCALE_SLOTS   ?= 800
SCALE_SECONDS ?= 150
# SCALE_SWE_ROOTS task roots at once on this host, each with an idle shell (docs/benchmarks.md, "make scale-swe").
SCALE_SWE_ROOTS ?= 1000
scale-swe: check-deps
	$(Q)$(MAKE) --no-print-directory $(BUILD)/bench/swe_env
	$(Q)$(BUILD)/bench/swe_env --scale $(SCALE_SWE_ROOTS)

# examples/swe-mini's image (docs/swe.md, "swe-mini"), under examples/swe-mini/images (git-ignored), and the check
# that its tasks are real: each gold patch makes its FAIL_TO_PASS tests pass and keeps PASS_TO_PASS, and no task
# resolves without one (training and held-out tasks).
SWE_JOBS ?= 2
swe-images:
	$(Q)scripts/swe-images.sh

swe-check: all
	$(Q)for f in tasks heldout; do for p in gold none; do \
	  $(BIN) swe validate examples/swe-mini/$$f.jsonl --patch $$p --jobs $(SWE_JOBS) >/dev/null || exit 1; done; done

scale: all
	$(Q)SCALE_WORKERS=$(SCALE_WORKERS) SCALE_SLOTS=$(SCALE_SLOTS) SCALE_SECONDS=$(SCALE_SECONDS) LT_BIN=$(abspath $(BIN)) scripts/scale.sh

# Weight propagation to workers in network namespaces behind tc-shaped links (docs/benchmarks.md, "make
# weights-bench"): needs root; not part of `make bench`. WB_DELAY, WB_GAP_S, WB_MODES, WB_TIMEOUT_S: see the script.
WB_WORKERS    ?= 64
WB_VERSIONS   ?= 10
WB_MODEL      ?= configs/models/moe-100m.json
WB_RATE       ?= 1gbit
weights-bench: all
	$(Q)WB_WORKERS=$(WB_WORKERS) WB_VERSIONS=$(WB_VERSIONS) WB_MODEL=$(WB_MODEL) WB_RATE=$(WB_RATE) \
	  LT_BIN=$(abspath $(BIN)) scripts/weights-bench.sh

# ---- the main job, benchmarks, docs --------------------------------------------------

run: all
	$(Q)bin/longtail train configs/default.json

# Each bench/NAME.c is one program that measures a component next to its baseline and
# prints one JSON object on its last stdout line; scripts/bench.sh merges them.
$(BUILD)/bench/%: bench/%.c $(LIB)
	@mkdir -p $(dir $@)
	@echo "  BENCH   $@"
	$(Q)$(CC) $(CFLAGS) $(LDSAN) -o $@ $< $(LIB) $(LDLIBS)

# swe_env measures boxes over the test suite's busybox image, written by tests/support/image.c.
$(BUILD)/bench/swe_env: bench/swe_env.c $(BUILD)/obj/tests/support/image.o $(LIB)
	@mkdir -p $(dir $@)
	@echo "  BENCH   $@"
	$(Q)$(CC) $(CFLAGS) $(LDSAN) -o $@ $< $(BUILD)/obj/tests/support/image.o $(LIB) $(LDLIBS)

bench-build: $(BIN) $(BENCH_BIN)

bench: check-deps
	$(Q)$(MAKE) --no-print-directory bench-build
	$(Q)scripts/bench.sh $(BENCH_BIN)

docs: all
	$(Q)bin/longtail config --schema-md > docs/config.md

# ---- lint and format -----------------------------------------------------------------

# `make lint`: every include against docs/architecture.md's folder table (scripts/lint.py, file:line for each
# upward include), then FORMAT_FILES against .clang-format (file:line:col for each line it would change, a line
# past 120 columns included).  FORMAT_FILES is every C file of the tree (the reformatting commit 4945d55 made
# them so); FORMAT_FILES=... narrows `make format` to some.
FORMAT_FILES ?= $(shell find $(LAYERS) tests bench -name node_modules -prune -o -name '*.[ch]' -print 2>/dev/null | sort)
lint: check-deps
	$(Q)python3 scripts/lint.py
	$(Q)$(if $(strip $(FORMAT_FILES)),clang-format --dry-run -Werror $(FORMAT_FILES))

format: check-deps
	$(Q)$(if $(strip $(FORMAT_FILES)),clang-format -i $(FORMAT_FILES))

clean:
	rm -rf build bin

-include $(shell find build -name '*.d' 2>/dev/null)
