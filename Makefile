# The two commands of README.md: `make run` and `make test`. Both set up what they
# need (scripts/setup.sh), configure and build into build/. `make sanitize` (CI runs it
# after `make test`) builds build-asan/ and build-tsan/ of its own (scripts/sanitize.sh).
BUILD ?= build
PREFIX ?= /usr/local
CONFIG ?= configs/tiny-gpt.toml
JOBS ?= $(shell nproc)

.PHONY: setup configure build run test sanitize install clean

setup:
	@bash scripts/setup.sh

# Wherever a CUDA toolkit is found, the CUDA backend must build whole (TROUPE_REQUIRE_CUDA).
configure: setup
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTROUPE_REQUIRE_CUDA=ON \
	  > $(BUILD).configure.log 2>&1 || (cat $(BUILD).configure.log; exit 1)
	@grep "^-- troupe:" $(BUILD).configure.log

build: configure
	@cmake --build $(BUILD) --parallel $(JOBS)

# `make run` builds the two programs it runs (troupe, troupe-core) and their libraries,
# not the tests; `make test` builds everything.
run: configure
	@cmake --build $(BUILD) --parallel $(JOBS) --target troupe troupe-core
	$(BUILD)/troupe run $(CONFIG)

test: build
	@status=0; (cd $(BUILD) && ctest --output-on-failure --parallel 2) || status=$$?; \
	  bash scripts/skipped-tests.sh $(BUILD); exit $$status

# The sanitizer sets of scripts/sanitize.sh, both run even when the first fails.
sanitize: setup
	@status=0; JOBS=$(JOBS) bash scripts/sanitize.sh asan || status=$$?; \
	  JOBS=$(JOBS) bash scripts/sanitize.sh tsan || status=$$?; exit $$status

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) $(BUILD).configure.log build-asan build-tsan
