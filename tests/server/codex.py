"""The Codex CLI (``codex exec``) pointed at our server: one ``CODEX_HOME`` per run, written by
``codex_home`` (used by tests/server/test_agent_clis.py and tests/server/golden/record.py)."""

from __future__ import annotations

import os
from pathlib import Path

CONFIG = """model = "{model}"
model_provider = "specdec"
approval_policy = "never"
sandbox_mode = "read-only"
model_instructions_file = "{instructions}"
web_search = "disabled"
[features]
goals = false
multi_agent = false
skill_search = false
view_image = false
image_generation = false
[model_providers.specdec]
name = "specdec"
base_url = "{base}/v1"
wire_api = "responses"
env_key = "SPECDEC_API_KEY"
"""


def codex_home(home: Path, *, base: str, model: str, system: str, key: str) -> dict[str, str]:
    """Write ``home``'s config.toml (a local Responses provider at ``base``, ``system`` as Codex's
    whole instructions, its optional features off: its default prompt is ~10k tokens) and
    return the environment ``codex exec`` runs in."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "instructions.md").write_text(system + "\n")
    (home / "config.toml").write_text(CONFIG.format(model=model, base=base,
                                                    instructions=home / "instructions.md"))
    return {**os.environ, "CODEX_HOME": str(home), "SPECDEC_API_KEY": key}
