# Thin wrapper over CMake (docs/architecture.md: never a second build system).
#   make          build into build/
#   make run      install deps, build, run every collective on local ranks, print where results went
#   make test     install deps, build, run the whole test suite (ctest)
#   make deps     install the Debian packages (root) or list what is missing
#   make fabrics  the six collectives at 2 ranks under shared memory, TCP loopback and an
#                 emulated two-node fabric (netns + tc), with a report and plots
#   make modelled-study  Llama 3.1 405B's tensor- and pipeline-parallel slices (and a 70B block's
#                 data-parallel one) with modelled H100 compute under shm, tcp-lo and netns
#                 (docs/modelled.md "The fabric study")
#   make clean    remove build/
BUILD ?= build
JOBS  ?= $(shell nproc)
RANKS ?= 2

.PHONY: all build deps run test clean fabrics modelled-study

all: build

deps:
	@bash scripts/install-deps.sh

# Ninja when it is installed (scripts/install-deps.sh installs it): it compiles a target's
# sources while the targets it links to still build, which Make's generator does not
# (docs/testing.md, "The build"). An existing build/ keeps the generator it was made with.
GENERATOR ?= $(if $(shell command -v ninja 2>/dev/null),-G Ninja,)

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(GENERATOR) -DCMAKE_BUILD_TYPE=Release

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

run: deps
	@$(MAKE) --no-print-directory build
	@RANKS=$(RANKS) BUILD=$(BUILD) bash scripts/run-local.sh

test: deps
	@$(MAKE) --no-print-directory build
	cd $(BUILD) && ctest --output-on-failure -j 2 $(CTEST_ARGS)

fabrics: deps
	@$(MAKE) --no-print-directory build
	MB_BIN=$(CURDIR)/$(BUILD)/bin /usr/bin/python3 scripts/sweep examples/fabrics-local.toml

modelled-study: deps
	@$(MAKE) --no-print-directory build
	MB_BIN=$(CURDIR)/$(BUILD)/bin /usr/bin/python3 scripts/sweep examples/modelled-405b.toml
	MB_BIN=$(CURDIR)/$(BUILD)/bin /usr/bin/python3 scripts/sweep examples/modelled-dp.toml

clean:
	rm -rf $(BUILD)
