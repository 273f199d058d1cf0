# archlab: `make test` sets up .venv (CPU torch first, then the project with its dev extras) and runs pytest.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
TORCH   := torch==2.13.0
STAMP   := $(VENV)/.installed

.PHONY: venv lint test test-avx2 bench bench-quick demo clean chromium

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e ".[dev]"
	touch $(STAMP)

venv: $(STAMP)

# the format (`ruff format`), then pyflakes, import order and line length, all at 100 columns (pyproject.toml
# [tool.ruff]); .ci/run runs it before the tests
lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

# headless Chromium renders the lab's report.html in tests/lab/test_report.py. `make test` never installs it (a test
# target must not change the system); that test runs where a browser is present or with ARCHLAB_BROWSER_TESTS=1,
# and skips otherwise. `make chromium` is the opt-in install: as root with apt only (~480 MB of packages).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; } \
	      || echo "chromium could not be installed: the report.html test will skip"; \
	  else echo "chromium is not installed and cannot be here (needs root and apt-get): the report.html test will skip"; \
	  fi; }

# PyTorch, oneDNN and MKL pick kernels per instruction set, so a float's last bits differ between CPU classes. On a
# CPU where torch runs AVX-512 kernels, the tests of bitwise claims (marker `kernels`) run first a second time with
# all three capped at AVX2, the path an AMD Zen 2 / 3 takes (docs/reliability.md says what that does and does not
# simulate); elsewhere the pass is skipped, saying why. Then the whole suite.
AVX2_CAPS := ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2

test: $(STAMP)
	@if $(BIN)/python -c "import sys, torch; sys.exit(torch.backends.cpu.get_cpu_capability() != 'AVX512')"; then \
	  echo "AVX2 pass: the kernels tests under $(AVX2_CAPS)"; \
	  $(AVX2_CAPS) $(BIN)/python -m pytest -n 2 --dist loadfile -m kernels; \
	else echo "AVX2 pass skipped: torch already runs $$($(BIN)/python -c "import torch; \
	  print(torch.backends.cpu.get_cpu_capability())") kernels here, no AVX-512 to cap"; fi
	$(BIN)/python -m pytest -n 2 --dist loadfile

test-avx2: $(STAMP)
	$(AVX2_CAPS) $(BIN)/python -m pytest -n 2 --dist loadfile -m kernels

# trains a small Llama-style model on the Python standard library sources (~5 min on 2 CPU cores), then samples
demo: $(STAMP)
	rm -rf runs/demo
	$(BIN)/archlab train --config configs/demo.yaml --out runs/demo
	$(BIN)/archlab generate --checkpoint runs/demo --prompt "def " --prompt "class " --prompt "import " \
		--max-new-tokens 120 --temperature 0.7 --seed 0

# speed and memory figures (not tests), written to benchmarks/results/: the training step against transformers
# and a nanoGPT-style model (train_step.md/.json, ~10-15 min on 2 cores), trainer overhead, data, decoding
bench: $(STAMP)
	mkdir -p benchmarks/results
	$(BIN)/python benchmarks/bench_step.py
	$(BIN)/python benchmarks/bench_train.py --steps 20 --repeats 2 | tee benchmarks/results/trainer_overhead.txt
	$(BIN)/python benchmarks/bench_data.py | tee benchmarks/results/data.txt
	$(BIN)/python benchmarks/bench_generate.py --quick | tee benchmarks/results/generate.md
	$(BIN)/python benchmarks/bench_generate.py --sizes llama --prompt-lens 128 --new-tokens 256 --repeats 9 \
		| tee benchmarks/results/generate_llama.md
	$(BIN)/python benchmarks/bench_inv_leaky.py
	$(BIN)/python benchmarks/bench_rerope_read.py

# a couple of minutes: one small Llama shape, archlab vs transformers vs nanoGPT-style (train_step_quick.md)
bench-quick: $(STAMP)
	$(BIN)/python benchmarks/bench_step.py --quick

clean:
	rm -rf $(VENV) build dist src/*.egg-info runs/demo
