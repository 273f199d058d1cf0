# archlab: `make test` sets up .venv (CPU torch first, then the project with its dev extras) and runs pytest.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
TORCH   := torch==2.13.0
STAMP   := $(VENV)/.installed

.PHONY: venv lint test bench demo clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e ".[dev]"
	touch $(STAMP)

venv: $(STAMP)

# pyflakes, import order and line length (pyproject.toml [tool.ruff]); .ci/run runs it before the tests
lint: $(STAMP)
	$(BIN)/ruff check .

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadfile

# trains a small Llama-style model on the Python standard library sources (~5 min on 2 CPU cores), then samples
demo: $(STAMP)
	rm -rf runs/demo
	$(BIN)/archlab train --config configs/demo.yaml --out runs/demo
	$(BIN)/archlab generate --checkpoint runs/demo --prompt "def " --prompt "class " --prompt "import " \
		--max-new-tokens 120 --temperature 0.7 --seed 0

# speed and memory figures (not tests): data preparation, trainer overhead, decoding vs transformers
bench: $(STAMP)
	$(BIN)/python benchmarks/bench_data.py
	$(BIN)/python benchmarks/bench_train.py
	$(BIN)/python benchmarks/bench_generate.py

clean:
	rm -rf $(VENV) build dist src/*.egg-info runs/demo
