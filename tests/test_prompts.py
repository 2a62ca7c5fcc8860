"""``specdec.prompts``: prompts built from installed sources are deterministic and carry
what they promise; ``short_questions`` is distinct and bounded."""

from __future__ import annotations

import pytest

from specdec.prompts import (QUESTION_FORMS, QUESTION_MODULES, code_edit_prompt, demo_prompt, json_records,
                             parity_prompts, short_questions, zen_text)


def test_short_questions_are_distinct_consecutively_different_and_bounded():
    qs = short_questions(64)
    assert len(set(qs)) == 64 and short_questions(5) == qs[:5]
    which = {form.format(mod): (f, m) for f, form in enumerate(QUESTION_FORMS)
             for m, mod in enumerate(QUESTION_MODULES)}
    for a, b in zip(qs, qs[1:]):  # consecutive questions differ in form and in module
        assert all(x != y for x, y in zip(which[a], which[b]))
    for n in (0, 65):
        with pytest.raises(ValueError, match=f"n must be in 1..64, got {n}"):
            short_questions(n)


def test_source_prompts_carry_the_source_and_are_deterministic():
    assert "def rgb_to_hsv" in demo_prompt() and demo_prompt() == demo_prompt()
    assert "def dedent" in code_edit_prompt("textwrap", "dedent", "Rename it.")
    assert parity_prompts() == parity_prompts() and all(parity_prompts().values())
    assert "\nBeautiful is better than ugly.\n" in zen_text()


def test_json_records_are_sorted_real_distributions():
    recs = json_records(3)
    assert len(recs) == 3 and all(set(r) == {"name", "version", "summary"} for r in recs)
    names = [r["name"].lower() for r in recs]
    assert names == sorted(names)
