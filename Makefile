# keelson: a thin wrapper over CMake + Ninja and the local stack.
#   make            configure and build into build/
#   make run        build, start the whole suite on 127.0.0.1 (gateway :8080), Ctrl-C stops it
#   make up / down  the same in the background / stop it
#   make test       unit and integration tests (ctest)
#   make test-asan  the same, built with AddressSanitizer and UBSan
#   make fuzz       libFuzzer on the parsers, FUZZ_SECONDS per target (default 60)
#   make format     clang-format every C file (format-check: fail if one is not)
BUILD         ?= build
BUILD_ASAN    ?= build-asan
STACK_DIR     ?= .local/stack
GATEWAY_PORT  ?= 8080
AUTH_REPLICAS ?= 2
BILLING_REPLICAS ?= 1
WEBHOOK_REPLICAS ?= 1
# 1: PostgreSQL's data survives make down / make up (accounts stay); 0: start empty.
KEEP_DATA     ?= 1
JOBS          ?= $(shell nproc 2>/dev/null || echo 2)
STACK         := deploy/local/stack.sh
STACK_ARGS    := --dir $(STACK_DIR) --bin $(BUILD) --gateway-port $(GATEWAY_PORT) \
                 --auth-replicas $(AUTH_REPLICAS) \
                 --billing-replicas $(BILLING_REPLICAS) --webhook-replicas $(WEBHOOK_REPLICAS) \
                 $(if $(filter 1,$(KEEP_DATA)),--keep-data)
# A sanitizer report fails the test that triggers it, services included.
SAN_ENV       := ASAN_OPTIONS=detect_leaks=1 \
                 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

.PHONY: all build run up down test asan test-asan fuzz format format-check clean ensure-packages

all: build

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja

build: $(BUILD)/build.ninja
	ninja -C $(BUILD)

ensure-packages:
	$(STACK) ensure-packages

run: ensure-packages build
	$(STACK) run $(STACK_ARGS)

up: ensure-packages build
	$(STACK) start $(STACK_ARGS)
	@$(STACK) curl-example --dir $(STACK_DIR)

down:
	$(STACK) stop --dir $(STACK_DIR)

test: ensure-packages build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

$(BUILD_ASAN)/build.ninja:
	cmake -S . -B $(BUILD_ASAN) -G Ninja -DKEELSON_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug

asan: $(BUILD_ASAN)/build.ninja
	ninja -C $(BUILD_ASAN)

test-asan: ensure-packages asan
	$(SAN_ENV) ctest --test-dir $(BUILD_ASAN) --output-on-failure -j $(JOBS)

# libFuzzer targets of the parsers (needs clang and libclang-rt-14-dev):
# replays the committed corpora and regressions, then fuzzes each target.
FUZZ_SECONDS ?= 60
fuzz:
	tools/fuzz.sh $(FUZZ_SECONDS)

# Our sources only: never generated code in the build trees.
format:
	@command -v clang-format >/dev/null || { echo "clang-format is not installed (apt-get install clang-format)"; exit 1; }
	find services tests tools -name '*.[ch]' -print0 | xargs -0 -r clang-format -i

# Fails, naming the files, when a C file is not formatted as .clang-format says.
format-check:
	@command -v clang-format >/dev/null || { echo "clang-format is not installed (apt-get install clang-format)"; exit 1; }
	find services tests tools -name '*.[ch]' -print0 | xargs -0 -r clang-format --dry-run --Werror

# Build trees only: the local stack's data in $(STACK_DIR) stays (make down first).
clean:
	rm -rf $(BUILD) $(BUILD_ASAN)
