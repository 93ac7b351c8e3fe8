# Two commands: `make demo` (prepare -> train -> translate -> score on the shipped Multi30k data)
# and `make test` (the whole test suite). Both create .venv first, with the exact versions of requirements.lock
# (PyTorch's CPU build among them).
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: setup demo test lint lock clean tool-venvs

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -r requirements.lock
	$(BIN)/pip install -q --no-deps -e .
	$(BIN)/pip check
	touch $@

demo: setup
	$(BIN)/python scripts/demo.py

# tests/test_argos*.py drive Argos Translate and LibreTranslate, each in a virtual environment of its own
# (.venv-argos: two more PyTorch installs, about a minute and a half on two cores the first time, then a no-op),
# and tests/test_deepl.py DeepL's Node.js client (tests/clients/deepl-node, from the npm registry, a few seconds):
# built here with the project's, before the tests, as .venv is. mtkit's modules are compiled to bytecode first, as
# pip install leaves an installed package: where PYTHONDONTWRITEBYTECODE is set, each of the processes
# the tests start would otherwise compile them again
test: setup tool-venvs
	$(BIN)/python -m compileall -q mtkit
	$(BIN)/python -m pytest -q

tool-venvs:
	PYTHON=$(PYTHON) bash benchmarks/argos/venvs.sh
	bash tests/clients/deepl-node/install.sh

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Refresh requirements.lock from pyproject.toml's ranges (torch held to constraints.txt's CPU build).
lock:
	$(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install -q "pip-tools==7.6.2"
	.lock-venv/bin/pip-compile -q --upgrade --extra test --extra ct2 --extra serve --extra documents --extra tensorboard --extra lora --extra web --constraint constraints.txt --strip-extras \
	    --no-emit-find-links --no-emit-index-url --output-file requirements.lock pyproject.toml
	rm -rf .lock-venv

clean:
	rm -rf $(VENV) .venv-argos tests/clients/deepl-node/node_modules work runs .pytest_cache
