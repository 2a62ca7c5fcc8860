"""Default self-distillation prompts that ship with the package: the kinds of request Spec-Bench
covers (chat, writing, reasoning, math, code, extraction, translation, summarisation, QA), built
from topic and task lists written here plus text every Python install holds (stdlib docstrings).

Contract: ``default_prompts(seed)`` is deterministic for a seed, every prompt non-empty and
distinct; nothing is downloaded. ``read_jsonl`` reads a user's prompts. Tests: tests/eagle/test_data.py.
"""

from __future__ import annotations

import importlib
import json
import random
from pathlib import Path

TOPICS = (
    "photosynthesis", "the French Revolution", "black holes", "compound interest", "the immune system",
    "climate change", "machine learning", "the Roman Empire", "volcanoes", "supply and demand",
    "the water cycle", "electric cars", "the printing press", "vaccines", "plate tectonics",
    "the stock market", "renewable energy", "the human brain", "ancient Egypt", "the internet",
    "honey bees", "the Cold War", "quantum computing", "coffee", "the Olympic Games", "sleep",
    "jazz music", "the moon landing", "recycling", "chess", "inflation", "DNA", "the Silk Road",
    "rainforests", "social media", "the Renaissance", "earthquakes", "democracy", "bread baking",
    "space exploration", "migration of birds", "public libraries", "the steam engine", "tea",
)
TASKS = (
    "Explain {t} to a ten-year-old.", "Write a short essay about {t}.",
    "What are three common misconceptions about {t}?", "Give me five interesting facts about {t}.",
    "Write a short poem about {t}.", "Summarize the history of {t} in one paragraph.",
    "What are the pros and cons of {t}?", "Write a blog post introduction about {t}.",
    "Describe {t} in simple terms, step by step.", "Write a dialogue between two friends about {t}.",
    "Create a quiz with three questions about {t}, with answers.",
    "How would you teach {t} to a class of beginners?",
)
QUESTIONS = (
    "If a train travels 60 km in 45 minutes, what is its average speed in km/h? Explain.",
    "A shop sells pens at 3 for $2. How much do 18 pens cost? Show your reasoning.",
    "What is the sum of the first 50 positive integers? Explain how you got it.",
    "Tom is twice as old as Anna. In 5 years their ages will sum to 40. How old is Anna?",
    "Is 221 a prime number? Explain.", "Solve for x: 3x + 7 = 25. Show each step.",
    "A rectangle has a perimeter of 30 and a length of 9. What is its area?",
    "Write a Python function that checks whether a string is a palindrome.",
    "Write a Python function that returns the n-th Fibonacci number iteratively.",
    "Write a Python function to merge two sorted lists into one sorted list.",
    "Write a SQL query that returns the ten customers with the highest total order value.",
    "Write a JavaScript function that removes duplicate values from an array.",
    "Explain the difference between a list and a tuple in Python.",
    "What is the difference between TCP and UDP?", "How do I reverse a linked list? Give code.",
    "Write a bash command that counts the lines of every .py file in a directory.",
    "Write an email to a colleague asking to move our meeting to Friday.",
    "Suggest a name and a slogan for a new coffee shop.", "How can I improve my time management?",
    "Plan a three-day trip to Rome for a family with two children.",
    "What should I consider when buying a used car?", "Give me a recipe for a simple vegetable soup.",
)
LANGS = ("French", "German", "Spanish", "Italian", "Portuguese")
DOC_MODULES = ("argparse", "json", "logging", "collections", "pathlib", "subprocess", "datetime",
               "random", "statistics", "unittest", "csv", "sqlite3", "threading", "heapq", "bisect",
               "textwrap", "difflib", "zipfile", "shutil", "email", "calendar", "fractions")


def _doc_sentences() -> list[str]:
    out = []
    for name in DOC_MODULES:
        doc = (importlib.import_module(name).__doc__ or "").replace("\n", " ")
        out += [s.strip().rstrip(".") + "." for s in doc.split(". ") if 40 <= len(s.strip()) <= 200][:3]
    return out


def default_prompts(seed: int = 0) -> list[str]:
    """Every prompt of the built-in set, shuffled by ``seed``."""
    prompts = [task.format(t=t) for t in TOPICS for task in TASKS] + list(QUESTIONS)
    for i, s in enumerate(_doc_sentences()):
        prompts.append(f"Translate into {LANGS[i % len(LANGS)]}: {s}")
        prompts.append(f"Summarize in one sentence and explain to a beginner: {s}")
    prompts = list(dict.fromkeys(prompts))
    random.Random(seed).shuffle(prompts)
    return prompts


def read_jsonl(path: str | Path) -> list[str]:
    """Prompts from a JSONL file: one object per line with "prompt" (or "text"), or a string."""
    prompts = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        obj = json.loads(line)
        text = obj if isinstance(obj, str) else obj.get("prompt") or obj.get("text")
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{path}:{n}: each line must be a string or an object with a "
                             "non-empty \"prompt\" (or \"text\") field.")
        prompts.append(text)
    if not prompts:
        raise ValueError(f"{path} holds no prompts.")
    return prompts
