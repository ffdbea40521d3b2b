# Thin wrapper around CMake. `make demo` and `make test` work on a fresh Debian 12 machine as root:
# they install the Debian packages they need when missing.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
# Extra ctest arguments, e.g. CTEST_ARGS='-R bridge' or '-E bench'.
CTEST_ARGS ?=
# g++: the C++ layer's tests and example; python3-dev: the headers of the Python package (python/);
# libpng-dev and libturbojpeg0-dev: PNG and JPEG files for `ferry pub --from` (and the JPEG
# channels of `ferry view`); libwebsockets-dev: `ferry view`; zlib1g-dev, liblz4-dev, libzstd-dev
# and libisal-dev: the CRCs and chunk compression of `ferry record`'s MCAP files (ISA-L's CRC-32
# is 12 times zlib's; without it zlib's is used).
DEB_PACKAGES := cmake make gcc g++ libc6-dev pkg-config python3-dev libpng-dev libturbojpeg0-dev \
	libwebsockets-dev zlib1g-dev liblz4-dev libzstd-dev libisal-dev
# The DDS bridge: Cyclone DDS and its IDL compiler; its tests build network namespaces.
BRIDGE_PACKAGES := cyclonedds-dev cyclonedds-tools iproute2
# What the tests need beyond the build: python3 checks the CLI's JSON, doxygen the API reference,
# gnuplot the demo's plot, pytest and NumPy the Python package's tests, dpkg-dev (dpkg-shlibdeps)
# and file (CPack runs it on what it packs) the Debian packages, cjpeg and djpeg
# (libjpeg-turbo-progs) the JPEG files of the CLI's tests.
TEST_PACKAGES := python3 doxygen gnuplot-nox python3-numpy python3-pytest dpkg-dev file \
	libjpeg-turbo-progs
# The page test of `ferry view` drives Chromium (large): installed when missing, but a machine
# that cannot install it only skips that test. Its npm packages come from the tests themselves,
# into the build tree; node and npm are used where they are (not checked with dpkg: a node
# installed otherwise would conflict with Debian's). Without npm, Debian's are installed.
VIEW_TEST_PACKAGES := chromium
# make deb: CPack derives the packages' dependencies with dpkg-shlibdeps and runs file on what it
# packs.
DEB_BUILD_PACKAGES := dpkg-dev file
# make install: where to (PREFIX), and a staging root put before it (DESTDIR, as usual).
PREFIX ?= /usr/local
DESTDIR ?=
# The API reference (make docs).
DOCS_PACKAGES := doxygen

.PHONY: all deps test-deps docs-deps demo-deps deb-deps ros-deps install-packages build demo test docs \
	install uninstall deb clean

all: build

deps:
	@$(MAKE) --no-print-directory install-packages PACKAGES="$(DEB_PACKAGES) $(BRIDGE_PACKAGES)"

test-deps:
	@$(MAKE) --no-print-directory install-packages PACKAGES="$(TEST_PACKAGES)"
	@$(MAKE) --no-print-directory install-packages PACKAGES="$(VIEW_TEST_PACKAGES)" || \
	  echo "chromium not installed: the page test of ferry view will be skipped"
	@command -v npm >/dev/null || $(MAKE) --no-print-directory install-packages \
	  PACKAGES="nodejs npm" || echo "npm not installed: the npm tests of ferry view will be skipped"

docs-deps:
	@$(MAKE) --no-print-directory install-packages PACKAGES="$(DOCS_PACKAGES)"

install-packages:
	@missing=""; for p in $(PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  if [ "$$(id -u)" -ne 0 ]; then echo "run as root or install:$$missing" >&2; exit 1; fi; \
	  apt-get update -q && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	fi

# ROS 2: rmw_ferry_cpp (rmw_ferry_cpp/) is built against the ROS 2 Humble at ROS_PREFIX when
# one is there, in its environment (setup.sh), as ROS users build. `make test` first installs
# the ROS 2 Humble that ships beside this tree for its tests (ROS_FIXTURE), where there is one.
ROS_PREFIX ?= /opt/ros/humble
ROS_FIXTURE ?= $(wildcard $(CURDIR)/../shared/ros2/install.sh)
ROS_ENV = if [ -f $(ROS_PREFIX)/setup.sh ]; then AMENT_TRACE_SETUP_FILES= . $(ROS_PREFIX)/setup.sh; \
	  ros_flags=-DCMAKE_PREFIX_PATH=$(ROS_PREFIX); fi;

ros-deps:
	@if [ ! -f $(ROS_PREFIX)/setup.sh ] && [ -n "$(ROS_FIXTURE)" ]; then \
	  if [ "$$(id -u)" -ne 0 ]; then \
	    echo "ROS 2 tests skipped: run as root to install ROS 2 Humble at $(ROS_PREFIX)"; \
	  else bash $(ROS_FIXTURE) $(ROS_PREFIX); fi; \
	fi

build: deps
	@$(ROS_ENV) cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $$ros_flags $(CMAKE_FLAGS) >/dev/null
	@$(ROS_ENV) cmake --build $(BUILD) -j $(JOBS)

# The demo draws its latency plot with gnuplot.
DEMO_PACKAGES := gnuplot-nox
DEMO_ARGS ?= --plot $(BUILD)/demo-latency.png

demo-deps:
	@$(MAKE) --no-print-directory install-packages PACKAGES="$(DEMO_PACKAGES)"

demo: build demo-deps
	./$(BUILD)/ferry demo $(DEMO_ARGS)

test: ros-deps build test-deps
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 300 $(CTEST_ARGS)

# The reference of include/ferry/*.h with README.md as its main page and docs/*.md as pages:
# $(BUILD)/docs/html/index.html. An undocumented declaration (any doxygen warning) fails it.
docs: docs-deps
	@mkdir -p $(BUILD)/docs
	FERRY_DOCS_OUT=$(BUILD)/docs doxygen docs/Doxyfile
	@echo "API reference: $(BUILD)/docs/html/index.html"

# The libraries, headers, ferry.pc, the CMake package, the command, its man pages and the docs
# under $(DESTDIR)$(PREFIX); `make uninstall` removes what the last install wrote (the build's
# install_manifest.txt).
# Installed for real (no DESTDIR), ld.so's cache is brought up to date, and a library directory
# that ld.so does not search is said, with what to do.
install: build
	DESTDIR="$(DESTDIR)" cmake --install $(BUILD) --prefix "$(PREFIX)"
	@[ -z "$(DESTDIR)" ] && [ "$$(id -u)" -eq 0 ] && ldconfig || true
	@libdir="$(PREFIX)/$$(sed -n 's/^libdir=$${prefix}\///p' $(BUILD)/pkgconfig/ferry.pc)"; \
	if [ -z "$(DESTDIR)" ] && ! ldconfig -p | grep -qF "=> $$libdir/libferry.so.0"; then \
	  echo "note: ld.so does not search $$libdir: programs linked with -lferry need"; \
	  echo "  echo $$libdir > /etc/ld.so.conf.d/ferry.conf && ldconfig   (or LD_LIBRARY_PATH=$$libdir)"; \
	fi

uninstall:
	cmake -DMANIFEST=$(BUILD)/install_manifest.txt -P cmake/uninstall.cmake
	@[ -z "$(DESTDIR)" ] && [ "$$(id -u)" -eq 0 ] && ldconfig || true

deb-deps:
	@$(MAKE) --no-print-directory install-packages PACKAGES="$(DEB_BUILD_PACKAGES)"

# Debian packages in $(BUILD): libferry0, libferry-dev, ferry (and python3-ferry with the Python
# module). Install them with: apt-get install ./$(BUILD)/*.deb
deb: build deb-deps
	cd $(BUILD) && cpack -G DEB
	@ls -1 $(BUILD)/*.deb

clean:
	rm -rf $(BUILD)
