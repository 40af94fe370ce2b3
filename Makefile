# Two entry points on a fresh machine: `make demo` and `make test`.
# Each bootstraps a local .venv (pip, pinned versions from pyproject.toml) first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck pytest bench stress clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,local]'
	# silero-vad's wheel carries the VAD model; its torch dependency is not needed.
	$(BIN)/python -m pip install --quiet --no-deps silero-vad==6.2.3
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/rejoinder console

test: lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples

typecheck: $(STAMP)
	$(BIN)/mypy --strict src

pytest: $(STAMP)
	$(BIN)/pytest

bench: $(STAMP)
	$(BIN)/python bench/turn_latency.py
	$(BIN)/python bench/turn_latency.py --audio
	$(BIN)/python bench/throughput.py
	$(BIN)/python bench/memory.py
	$(BIN)/python bench/import_time.py
	$(BIN)/python bench/vad_cpu.py
	$(BIN)/python bench/realtime_cpu.py

# The randomized lifecycle test with 100,000 sequences (CI runs 500).
stress: $(STAMP)
	REJOINDER_STRESS_EXAMPLES=100000 $(BIN)/pytest -p no:cacheprovider tests/session/test_lifecycle_random.py

clean:
	rm -rf $(VENV) build .mypy_cache .pytest_cache .ruff_cache
