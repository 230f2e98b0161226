# hwgen: every target does its own set-up; `make setup` is cheap when nothing changed.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
JOBS   ?= 2

.PHONY: setup demo test test-fast sim bench mutate lint clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(PY) -m hwgen.cli doctor
	$(PY) -m hwgen.cli generate --rows 8 --cols 8 --epilogue bias,requant,relu,clamp,residual --mem-addr-bits 24 -o build/v8x8all
	$(PY) -m hwgen.cli gemm --variant build/v8x8all --m 256 --k 256 --n 256 --epilogue bias,requant,relu
	$(PY) -m hwgen.cli compile examples/qdq_cnn.onnx --variant build/v8x8all -o build/plans/qdq_cnn --explain
	$(PY) -m hwgen.cli run examples/qdq_mlp_residual.onnx --variant build/v8x8all --output build/qdq_mlp_residual_y.npy
	$(PY) -m fusion.runtime.compare --variant build/v8x8all examples/qop_mlp.onnx examples/qdq_mlp_residual.onnx examples/qdq_cnn.onnx
	$(PY) -m examples.real_check input resnet8_qdq build/resnet8_qdq_x.npy
	$(PY) -m hwgen.cli run examples/real/resnet8_qdq.onnx --variant build/v8x8all --input x=build/resnet8_qdq_x.npy --output y=build/resnet8_qdq_y.npy
	$(PY) -m examples.real_check output resnet8_qdq build/resnet8_qdq_y.npy

test: setup
	$(PY) -m pytest -n $(JOBS) -q tests

test-fast: setup
	$(PY) -m pytest -q -m "not slow" tests

sim: setup
	$(PY) -m pytest -n $(JOBS) -q -m slow tests

bench: setup
	$(PY) -m bench.run

# Inject each fault of bench/mutations.py into a scratch copy and check that hwgen catches it.
mutate: setup
	$(PY) -m bench.mutate

lint: setup
	$(VENV)/bin/ruff check hwgen fusion sim synth tests bench

clean:
	rm -rf build .pytest_cache
