# hwgen: every target does its own set-up; `make setup` is cheap when nothing changed.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
JOBS   ?= 2

.PHONY: setup demo test test-fast sim bench lint clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(PY) -m hwgen.cli doctor
	$(PY) -m hwgen.cli generate --rows 8 --cols 8 --epilogue bias,requant,relu -o build/v8x8
	$(PY) -m hwgen.cli gemm --variant build/v8x8 --m 256 --k 256 --n 256 --epilogue bias,requant,relu
	$(PY) -m hwgen.cli gemm --variant build/v8x8 --m 256 --k 64 --n 256 --epilogue bias,requant,relu
	$(PY) -m hwgen.cli gemm --variant build/v8x8 --m 256 --k 64 --n 256 --epilogue bias,requant,relu --unfused

test: setup
	$(PY) -m pytest -n $(JOBS) -q tests

test-fast: setup
	$(PY) -m pytest -q -m "not slow" tests

sim: setup
	$(PY) -m pytest -n $(JOBS) -q -m slow tests

bench: setup
	$(PY) -m bench.run

lint: setup
	$(VENV)/bin/ruff check hwgen fusion sim tests bench

clean:
	rm -rf build .pytest_cache
