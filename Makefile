# gpusnap: top-level entry points. CMake does the building; this file is what
# users and CI type. `make test` and `make demo` install what they need.
# No "Entering/Leaving directory" lines from the makes CMake's build runs.
MAKEFLAGS += --no-print-directory
BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: all build deps test test-unit test-asan test-gpu demo bench clean install

all: build

deps:
	@scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# Unit and command-line tests, normal build then ASan+UBSan build, then the
# GPU suite (which says it skips, in one line, where there is no GPU).
test: build
	@scripts/run-tests.sh $(BUILD) $(ASAN_BUILD)

test-unit: build
	@cd $(BUILD) && ctest --output-on-failure --timeout 600 -j $(JOBS)

test-gpu: build
	@tests/gpu/run.sh

# Checks for a GPU first, then builds what it needs, quietly (scripts/demo.sh).
demo:
	@scripts/demo.sh $(BUILD)

bench: build
	@bench/run.sh

install: build
	@cmake --install $(BUILD)

clean:
	@rm -rf $(BUILD) $(ASAN_BUILD)
