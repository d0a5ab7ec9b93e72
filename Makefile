# The README's two commands. Each creates .venv on first use and reinstalls when pyproject.toml changes.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The local room's browser test drives Debian's Chromium through Playwright (Playwright's own browser download
# does not work on machines without internet access). Set before the rules: make expands prerequisites as it
# reads them.
BROWSER := /usr/bin/chromium

.PHONY: run test lint screenshot clean

run: $(VENV)/.installed
	$(BIN)/aizuchi run

test: $(VENV)/.installed-dev $(BROWSER)
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

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info
