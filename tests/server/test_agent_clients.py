"""Agent clients people use, unchanged, against `specdec serve` on Qwen2.5-Coder-0.5B.

- openai-agents (the OpenAI Agents SDK) runs an agent with a Python function tool
  through its Chat Completions model: the model's call reaches the function with the
  arguments it wrote, and the tool's return is the run's output
  (``tool_use_behavior="stop_on_first_tool"``: this 0.5B model calls the tool again
  rather than answering from a result, see test_server_tools_qwen).
- The ``llm`` CLI, configured for an OpenAI-compatible endpoint the documented way
  (``extra-openai-models.yaml`` in ``LLM_USER_PATH``): ``--schema`` gets JSON that
  validates against its schema, and ``-T`` runs one of llm's own tools from the model's
  call (``--td`` shows the call and its result).

The package's shared Qwen server serves the module (tests/server/conftest.py: greedy by
default, a batch of one, behind its key): a Qwen server of its own cost a 2.4 GB load.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
from conftest import requires, requires_model

MODEL = "qwen2.5-coder-0.5b"
pytestmark = [pytest.mark.slow, requires_model(MODEL)]


@pytest.fixture(scope="module")
def server(qwen):  # the package's shared Qwen server (tests/server/conftest.py)
    return qwen


@requires("openai-agents", pip="pip install openai-agents")
def test_openai_agents_runs_a_tool_through_the_server(server):
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)  # no export to OpenAI's servers
    calls = []

    @function_tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        calls.append(city)
        return f"Sunny, 18 degrees Celsius in {city}."

    client = AsyncOpenAI(base_url=server.base + "/v1", api_key=server.api_key)
    agent = Agent(name="weather", instructions="You answer weather questions with the tool.",
                  model=OpenAIChatCompletionsModel(model=MODEL, openai_client=client),
                  tools=[get_weather], tool_use_behavior="stop_on_first_tool")
    result = Runner.run_sync(agent, "What is the weather like in Paris today?")
    assert calls == ["Paris"]
    assert result.final_output == "Sunny, 18 degrees Celsius in Paris."


def _llm(server, tmp_path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "extra-openai-models.yaml").write_text(
        f"- model_id: specdec\n  model_name: {MODEL}\n  api_base: {server.base}/v1\n"
        "  supports_tools: true\n  supports_schema: true\n"
        "  api_key_name: specdec\n")  # a key is sent (from $OPENAI_API_KEY): the server wants one
    # LLM_LOAD_PLUGINS="": llm's own OpenAI models only. The default model's package is an
    # llm plugin installed without llama-cpp-python (see the Makefile), so loading it fails.
    env = {**os.environ, "LLM_USER_PATH": str(tmp_path), "OPENAI_API_KEY": server.api_key,
           "LLM_LOAD_PLUGINS": ""}
    return subprocess.run([shutil.which("llm"), "-m", "specdec", "--no-log", *args],
                          capture_output=True, text=True, env=env, timeout=300)


@requires("llm", pip="pip install llm")
def test_llm_cli_schema_gets_json_that_validates(server, tmp_path):
    r = _llm(server, tmp_path, "--schema", "name, age int",
             "Invent a person: give their name and age.")
    assert r.returncode == 0, r.stderr
    person = json.loads(r.stdout)
    assert set(person) == {"name", "age"}
    assert isinstance(person["name"], str) and isinstance(person["age"], int)


@requires("llm", pip="pip install llm")
def test_llm_cli_runs_a_tool_the_model_calls(server, tmp_path):
    """The model's call runs llm's function with its arguments (``--td`` prints both).
    Given the result, this 0.5B model calls again, so the chain limit (2) ends the run."""
    tool = ('def get_weather(city: str) -> str:\n'
            '    "Get the current weather in a city."\n'
            '    return f"Sunny, 18 degrees Celsius in {city}."\n')
    r = _llm(server, tmp_path, "--functions", tool, "--td", "--chain-limit", "2",
             "-o", "max_tokens", "40", "What is the weather like in Paris today?")
    out = r.stdout + r.stderr
    assert "Tool call: get_weather({'city': 'Paris'})" in out, out
    assert "Sunny, 18 degrees Celsius in Paris." in out, out
    assert r.returncode == 0 or "Chain limit of 2 exceeded" in out, out
