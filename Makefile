# gpusnap: top-level entry points. CMake does the building; this file is what
# users and CI type. `make test` and `make demo` install what they need.
# No "Entering/Leaving directory" lines from the makes CMake's build runs.
MAKEFLAGS += --no-print-directory
BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: all build deps deps-test test test-unit test-asan test-gpu demo bench clean install deb

all: build

# What building needs (cmake, cc, make; `make`, `make demo`), and that plus
# what the tests need (scripts/install-deps.sh lists it in one place).
deps:
	@scripts/install-deps.sh build

deps-test:
	@scripts/install-deps.sh test

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# Unit and command-line tests, normal build then ASan+UBSan build, then the
# GPU suite (which says it skips, in one line, where there is no GPU). Each
# stage says what it does in a line, set-up included (it takes minutes).
test:
	@echo "== what the build and the tests need (scripts/install-deps.sh)"
	@$(MAKE) --no-print-directory deps-test
	@echo "== building ($(BUILD))"
	@$(MAKE) --no-print-directory build
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

# A Debian package of what `make install` puts in place, under /usr (CPack, see CMakeLists.txt).
deb: build
	@cd $(BUILD) && { cpack -G DEB >cpack.log 2>&1 || { cat cpack.log; exit 1; }; } && ls $(abspath $(BUILD))/gpusnap_*.deb

clean:
	@rm -rf $(BUILD) $(ASAN_BUILD)
