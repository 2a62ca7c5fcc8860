# Two entry points for a fresh machine (see README):
#   make demo  - install everything and run the main job on the embedded default model
#   make test  - install and run the whole test suite
#   make test-fast - the same without the tests marked slow (real-model runs): minutes
PY ?= python3
# Prints the OpenBLAS path (or nothing) without importing mlx; read at recipe time,
# after setup-blas may have installed it.
BLAS = $$($(PY) -c 'from specdec.backend import openblas_path; print(openblas_path() or "")')

.PHONY: demo test test-fast install install-dev setup-blas

setup-blas:
	@if [ "$$(uname -s)" = Linux ] && [ -z "$(BLAS)" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && apt-get install -y -qq libopenblas0-pthread) >/dev/null \
	      || echo "warning: could not install libopenblas0-pthread; mlx on CPU will be slow"; \
	  else \
	    echo "warning: OpenBLAS missing; install it with: sudo apt-get install libopenblas0-pthread"; \
	  fi; \
	fi

install: setup-blas
	$(PY) -m pip install -q -e .

install-dev: setup-blas
	$(PY) -m pip install -q -e ".[dev,models]"

demo: install
	$(PY) -m specdec generate --compare --verbose

test: install-dev
	LD_PRELOAD="$(BLAS)" $(PY) -m pytest -q

test-fast: install-dev
	LD_PRELOAD="$(BLAS)" $(PY) -m pytest -q -m "not slow"
