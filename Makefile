# Thin wrapper around CMake. `make demo` and `make test` work on a fresh Debian 12 machine as root:
# they install the Debian packages they need when missing.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
DEB_PACKAGES := cmake make gcc libc6-dev pkg-config
# What the tests need beyond the build: python3 checks the CLI's JSON.
TEST_PACKAGES := python3

.PHONY: all deps test-deps install-packages build demo test clean

all: build

deps:
	@$(MAKE) --no-print-directory install-packages PACKAGES="$(DEB_PACKAGES)"

test-deps:
	@$(MAKE) --no-print-directory install-packages PACKAGES="$(TEST_PACKAGES)"

install-packages:
	@missing=""; for p in $(PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  if [ "$$(id -u)" -ne 0 ]; then echo "run as root or install:$$missing" >&2; exit 1; fi; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; \
	fi

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

demo: build
	./$(BUILD)/ferry demo

test: build test-deps
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 300

clean:
	rm -rf $(BUILD)
