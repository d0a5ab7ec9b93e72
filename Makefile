# The README's two commands. Each creates .venv on first use and reinstalls when pyproject.toml changes.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The local room's browser test drives Debian's Chromium through Playwright (Playwright's own browser download
# does not work on machines without internet access). Set before the rules: make expands prerequisites as it
# reads them.
BROWSER := /usr/bin/chromium
# nftables cuts the links between the network-cut tests' hosts (tests/network; iproute2 makes the hosts).
NFT := /usr/sbin/nft
# The network-latency test's delayed links (tests/support/lab_delayer.py): iptables-nft hands a link's packets to an
# NFQUEUE, and NetfilterQueue (the netlab extra, built here against Debian's libnetfilter-queue-dev) takes them.
NETLAB := $(VENV)/.installed-netlab
# The JavaScript MCP clients the MCP tests drive (tests/js/package.json, pinned by its package-lock.json).
JS_CLIENTS := tests/js/node_modules/.installed

.PHONY: run test lint screenshot clean

# `make run` says what aizuchi says, and nothing of its own. GNU make follows a failed recipe with a line of its own
# ("make: *** [Makefile:NN: run] Error 1") and exits 2, whatever the flags: -s and .SILENT quiet only the echo of
# the command, `exec` in the recipe changes nothing (make still waits for it), and an error quieted with `-` and -s
# makes make exit 0. One failure is quiet: in question mode (-q), a recursive recipe line (+) that exits 1 means
# "not up to date", which make reports by exiting 1 without a word. So once aizuchi is installed and up to date,
# `make run` (or plain `make`) runs in question mode, and a failing aizuchi is its own line and status 1 (its status
# 2, for invalid settings, becomes 1 too: make exits only 0, 1 or 2, and 2 is never quiet). When it must install
# first, or under -n, -q or -t, make runs as usual: a failure then ends with make's line and status 2.
ifeq ($(filter-out run,$(or $(MAKECMDGOALS),run)),)
INSTALLED := $(and $(wildcard $(VENV)/.installed),$(wildcard $(BIN)/python))
STALE := $(shell find pyproject.toml -newer $(VENV)/.installed 2>/dev/null)
MODES := $(firstword -$(MAKEFLAGS))
AS_USUAL := $(findstring n,$(MODES))$(findstring q,$(MODES))$(findstring t,$(MODES))
QUIET_RUN := $(and $(INSTALLED),$(if $(STALE)$(AS_USUAL),,yes))
endif
ifneq ($(QUIET_RUN),)
MAKEFLAGS += -q
endif

run: $(VENV)/.installed
	$(if $(QUIET_RUN),+)@$(BIN)/aizuchi run || exit 1

test: $(VENV)/.installed-dev $(BROWSER) $(NFT) $(NETLAB) $(JS_CLIENTS)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/pytest

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The README's picture of the local room (default settings, a desktop window, the light theme), taken by the room's
# browser test.
screenshot: $(VENV)/.installed-dev $(BROWSER)
	AIZUCHI_README_SCREENSHOT=docs/room.png AIZUCHI_REQUIRE_SERVICES=1 \
		$(BIN)/pytest -q tests/arbiter/room/test_browser.py -k light_and_dark

$(VENV)/bin/python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "aizuchi needs Python 3.11 or newer ($(PYTHON) is older)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(VENV)/bin/python
	$(BIN)/pip install --quiet -e .
	@touch $@

$(VENV)/.installed-dev: pyproject.toml | $(VENV)/bin/python
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@ $(VENV)/.installed

$(BROWSER):
	@if ! command -v apt-get >/dev/null; then \
		echo "note: install Chromium for the room's browser test (it skips without one)"; exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then sudo=; elif sudo -n true 2>/dev/null; then sudo=sudo; else \
		echo "note: 'sudo apt-get install chromium' for the room's browser test (it skips without one)"; exit 0; fi; \
	echo "installing Debian's chromium for the room's browser test"; \
	$$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq chromium >/dev/null

$(NFT):
	@if ! command -v apt-get >/dev/null; then \
		echo "note: install nftables for the network-cut tests (they skip without it)"; exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then sudo=; elif sudo -n true 2>/dev/null; then sudo=sudo; else \
		echo "note: 'sudo apt-get install nftables' for the network-cut tests (they skip without it)"; exit 0; fi; \
	echo "installing Debian's nftables for the network-cut tests"; \
	$$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq nftables iproute2 >/dev/null

$(NETLAB): pyproject.toml | $(VENV)/.installed-dev
	@if [ "$$(uname)" != Linux ]; then exit 0; fi; \
	if ! dpkg -s iptables libnetfilter-queue-dev gcc >/dev/null 2>&1; then \
		if ! command -v apt-get >/dev/null; then \
			echo "note: install iptables and libnetfilter-queue-dev for the network-latency test (it skips without them)"; exit 0; fi; \
		if [ "$$(id -u)" = 0 ]; then sudo=; elif sudo -n true 2>/dev/null; then sudo=sudo; else \
			echo "note: 'sudo apt-get install iptables libnetfilter-queue-dev gcc' for the network-latency test (it skips without them)"; exit 0; fi; \
		echo "installing Debian's iptables and libnetfilter-queue-dev for the network-latency test"; \
		$$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq iptables libnetfilter-queue-dev gcc >/dev/null; \
	fi; \
	if $(BIN)/pip install --quiet -e '.[dev,netlab]'; then touch $@; else \
		echo "note: NetfilterQueue did not build: the network-latency test skips"; fi

$(JS_CLIENTS): tests/js/package-lock.json
	@if ! command -v npm >/dev/null; then \
		echo "note: install Node.js and npm for the JavaScript MCP clients' tests (they skip without them)"; exit 0; fi; \
	npm ci --prefix tests/js --no-audit --no-fund --silent && touch $@

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info tests/js/node_modules
