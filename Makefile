# Two commands: `make demo` (prepare -> train -> translate -> score on the shipped Multi30k data)
# and `make test` (the whole test suite). Both create .venv first, with PyTorch's CPU build.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: setup demo test bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt "torch==2.13.0"
	$(BIN)/pip install -q -c constraints.txt -e ".[test,ct2]"
	touch $@

demo: setup
	$(BIN)/python scripts/demo.py

test: setup
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) work runs .pytest_cache
