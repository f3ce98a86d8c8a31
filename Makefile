# Everything a fresh machine needs is installed from here (no hand steps).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
SPECMODEL := $(VENV)/bin/specmodel
# CPU build of torch available on this kind of machine; a GPU box installs its own CUDA torch first.
TORCH_SPEC ?= torch==2.13.0
TP ?= 8
SGLANG_SPEC ?= sglang==0.5.5
NAME ?= cpu-demo

.PHONY: demo test test-fast lint bench fuzz clean

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	@if $(PY) -c "import torch" 2>/dev/null; then echo "torch already installed"; \
	  else $(PY) -m pip install -q "$(TORCH_SPEC)"; fi
	$(PY) -m pip install -q -e '.[profile,dev]'
	# the real SGLang source (pure-Python wheel, no deps): tests check the hook against its classes
	$(PY) -m pip install -q --no-deps "$(SGLANG_SPEC)"
	touch $@

install: $(VENV)/.installed

# The main job, end to end on the embedded default: CPU, gloo, a scaled-down model.
demo: $(VENV)/.installed
	$(SPECMODEL) profile --tp $(TP) --name $(NAME)
	$(SPECMODEL) predict --profile profiles/$(NAME) --accept-len 3.2
	$(SPECMODEL) report --profile profiles/$(NAME) --accept-len 3.2 -o reports/$(NAME).pdf

test: $(VENV)/.installed
	$(PY) -m pytest -q -p no:cacheprovider

# everything but the tests marked slow (real TP ranks, the end-to-end report): for the edit-test loop
test-fast: $(VENV)/.installed
	$(PY) -m pytest -q -p no:cacheprovider -m "not slow"

# the readers' fuzz test for 10 minutes instead of the suite's 30 s (figures: docs/reliability.md)
FUZZ_SECONDS ?= 600
fuzz: $(VENV)/.installed
	SPECMODEL_FUZZ_SECONDS=$(FUZZ_SECONDS) SPECMODEL_FUZZ_REPORT=$(CURDIR)/fuzz-report.jsonl \
	  $(PY) -m pytest -q -p no:cacheprovider tests/test_fuzz.py
	@cat fuzz-report.jsonl && rm -f fuzz-report.jsonl

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check specmodel tests benchmarks scripts
	$(VENV)/bin/mypy specmodel

bench: $(VENV)/.installed
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
