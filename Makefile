# Thin driver over CMake. `make demo` and `make test` are the two commands in the README.
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
CTEST_FLAGS ?=

PREFIX ?= /usr/local

.PHONY: all deps build test conformance demo bench test-asan test-tsan test-release fuzz lint clean install package wheel

all: build

deps:
	@scripts/install-deps.sh
	@scripts/install-otlp-receiver.sh

# Development builds treat warnings as errors; a user's plain `cmake` build does not.
build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWD_WERROR=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) $(CTEST_FLAGS)

# The conformance families (../shared/conformance: NCCL's and PyTorch's real order) against this
# build; a FAIL not in tests/conformance/known-failures.txt fails it.
conformance: build
	@scripts/conformance.sh $(BUILD)

demo: build
	@tests/demo/run-demo.sh $(BUILD)

# The plugin, its generic-name link, the analyzer, pkg-config and CMake package files, man pages
# and the example configuration under $(PREFIX) (DESTDIR honoured, as cmake --install does).
install: build
	@cmake --install $(BUILD) --prefix $(PREFIX)

# A .deb (and a tarball) for cluster admins: $(BUILD)/nccl-watchdog_<version>_<arch>.deb
package: build
	@cd $(BUILD) && cpack -G DEB && cpack -G TGZ

# The pip wheel (plugin, analyzer, status, python -m nccl_watchdog): dist/nccl_watchdog-*.whl
wheel: deps
	@scripts/build-wheel.sh build-wheel dist

bench: build
	@bench/run-bench.sh $(BUILD)
	@scripts/conformance.sh $(BUILD) bench
	@bench/conformance-count.sh $(BUILD)

test-asan:
	@WD_WITH_SANITIZERS=1 scripts/install-deps.sh
	@$(MAKE) --no-print-directory test BUILD=build-asan CMAKE_FLAGS="-DWD_SANITIZE=address,undefined" CTEST_FLAGS="-LE once"

test-tsan:
	@WD_WITH_SANITIZERS=1 scripts/install-deps.sh
	@$(MAKE) --no-print-directory test BUILD=build-tsan CMAKE_FLAGS="-DWD_SANITIZE=thread" CTEST_FLAGS="-LE once"

# A user's Release build: no -Werror, and it must compile without a single warning. What it
# proves is the build; its tests are a smoke set (units, the basic scenario and the demo): the
# suite itself runs in the plain and sanitizer builds.
test-release: deps
	@cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build build-release -j $(JOBS) 2>&1 | tee build-release.log | grep -E 'warning|error' && \
	  { echo "Release build: warnings above"; exit 1; } || true
	@cd build-release && ctest --output-on-failure -j $(JOBS) -LE once -R '^(unit|build)\.|^scenario\.(basic|hang|demo|postmortem|realnccl)$$|^fuzz\.callbacks$$'

# The dump reader under libFuzzer for a bounded time (WD_FUZZ_SECONDS, 60 by default).
fuzz: deps
	@WD_WITH_FUZZ=1 scripts/install-deps.sh
	@scripts/fuzz-load.sh

lint: build
	@WD_WITH_LINT=1 scripts/install-deps.sh
	@scripts/lint.sh $(BUILD)

clean:
	rm -rf build build-asan build-tsan build-release build-release.log build-wheel dist
