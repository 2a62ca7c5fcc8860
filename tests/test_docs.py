"""The docs' links hold: every ``docs/<page>.md#<anchor>`` named in the code, the tests, the README
or lab/ names a page that exists and a heading on it, and every relative Markdown link in README.md,
docs/ and lab/'s READMEs resolves (file, and heading when it names one). Anchors are GitHub's: the heading
lower-cased, punctuation dropped, spaces to hyphens, ``-1``, ``-2`` for repeats. No model, no mlx."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC_REF = re.compile(r"docs/([\w.-]+\.md)(?:#([\w-]+))?")
MD_LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


@cache
def anchors(page: Path) -> frozenset[str]:
    """GitHub's anchors of ``page``'s headings (outside code fences)."""
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
        m = None if fenced else re.match(r"#{1,6} (.*)", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return frozenset(out)


def _files(*patterns: str) -> list[Path]:
    return sorted(p for pat in patterns for p in ROOT.glob(pat) if ".git" not in p.parts)


def _problem(target: Path, anchor: str | None) -> str | None:
    if not target.exists():
        return "no such file"
    if anchor and target.suffix == ".md" and anchor not in anchors(target):
        return f"no heading #{anchor}"
    return None


def test_every_docs_reference_names_a_page_and_heading():
    bad = []
    for f in _files("specdec/**/*.py", "tests/**/*.py", "lab/**/*.py", "lab/**/*.md", "README.md",
                    "docs/*.md", "Makefile"):
        for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            for page, anchor in DOC_REF.findall(line):
                why = _problem(ROOT / "docs" / page, anchor or None)
                if why:
                    bad.append(f"{f.relative_to(ROOT)}:{i}: docs/{page}{'#' + anchor if anchor else ''}: {why}")
    assert not bad, "stale docs references (see docs/README.md for the pages):\n" + "\n".join(bad)


def test_relative_markdown_links_resolve():
    bad = []
    for f in _files("README.md", "docs/*.md", "lab/**/README.md"):  # report.md files are bench output
        for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            for link in MD_LINK.findall(line):
                if re.match(r"[a-z]+:", link):
                    continue  # http(s), mailto: not checked (no network in tests)
                path, _, anchor = link.partition("#")
                target = (f.parent / path).resolve() if path else f
                why = _problem(target, anchor or None)
                if why:
                    bad.append(f"{f.relative_to(ROOT)}:{i}: {link}: {why}")
    assert not bad, "broken links:\n" + "\n".join(bad)


@pytest.mark.parametrize("heading, slug", [
    ("## The KV budget", "the-kv-budget"),
    ("## Recurrent layers (hybrid models)", "recurrent-layers-hybrid-models"),
    ("### Every drafter, every class (`specdec bench`)", "every-drafter-every-class-specdec-bench"),
])
def test_anchors_follow_github(tmp_path, heading, slug):
    page = tmp_path / "p.md"
    page.write_text(f"{heading}\n\n```\n{heading}\n```\n{heading}\n", encoding="utf-8")
    assert anchors(page) == {slug, f"{slug}-1"}
