"""Default self-distillation prompts that ship with the package: the kinds of request Spec-Bench
covers (chat, writing, reasoning, math, code, extraction, translation, summarisation, QA), built
from topic and task lists written here plus text every Python install holds (stdlib docstrings).
The first set (templated chat tasks) comes first, in its old order (stored shards stay valid);
``mixed_prompts`` follows: requests shaped like Spec-Bench's categories (German to English,
long-text summaries, passage + question, short factual questions, word problems with seeded
numbers, role play) — never Spec-Bench's own questions (that is the test set). A head trained
on the first set alone drafted ~0.17 at position 1 on Spec-Bench's questions vs 0.43 on held-out
ones of the same set (lab/eagle-head-tokens-per-forward/README.md).

Contract: ``default_prompts(seed)`` is deterministic for a seed, every prompt non-empty and
distinct; nothing is downloaded. ``read_jsonl`` reads a user's prompts. Tests: tests/eagle/test_data.py.
"""

from __future__ import annotations

import importlib
import json
import random
import warnings
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


DOC_MODULES_LONG = ("functools", "itertools", "os", "re", "string", "typing", "decimal", "io",
                    "socket", "tarfile", "pickle", "asyncio", "contextlib", "dataclasses")
GERMAN = (
    "Die Regierung hat am Montag neue Maßnahmen zum Schutz des Klimas angekündigt .",
    "Nach dem Sturm waren tausende Haushalte im Norden des Landes ohne Strom .",
    "Der Verein gewann das Spiel am Samstag mit zwei zu eins .",
    "Die Preise für Lebensmittel sind im vergangenen Jahr deutlich gestiegen .",
    "Viele Studenten finden in der Stadt keine bezahlbare Wohnung mehr .",
    "Das Museum zeigt ab Dezember eine Ausstellung über die Geschichte der Eisenbahn .",
    "Die Polizei sucht nach Zeugen eines Unfalls auf der Autobahn .",
    "Der Konzern will in den nächsten drei Jahren fünftausend Stellen abbauen .",
    "Wissenschaftler haben einen neuen Impfstoff gegen die Krankheit entwickelt .",
    "Die Bürger der Stadt stimmten gegen den Bau eines neuen Flughafens .",
    "Im Sommer kamen mehr Touristen als je zuvor an die Küste .",
    "Der Minister trat nach heftiger Kritik an seiner Politik zurück .",
    "Die Schule bietet ab dem nächsten Jahr Unterricht in Informatik an .",
    "Ein Brand zerstörte in der Nacht eine Lagerhalle am Stadtrand .",
    "Die Zentralbank hat den Leitzins erneut unverändert gelassen .",
    "Forscher beobachten seit Jahren, dass die Gletscher in den Alpen schmelzen .",
    "Der Film erzählt die Geschichte einer Familie in Berlin nach dem Krieg .",
    "Die Bahn kündigte an, dass viele Züge am Wochenende ausfallen werden .",
    "Das neue Gesetz soll Verbraucher besser vor Betrug im Internet schützen .",
    "Die Zahl der Arbeitslosen ist im Oktober leicht gesunken .",
    "Der Präsident traf sich mit Vertretern der Gewerkschaften zu Gesprächen .",
    "Die Ärzte warnen vor den Folgen von zu wenig Schlaf bei Kindern .",
    "In der Innenstadt sollen mehr Radwege und weniger Parkplätze entstehen .",
    "Das Unternehmen meldete für das dritte Quartal einen Rekordgewinn .",
    "Die Feuerwehr konnte die Bewohner des Hauses rechtzeitig retten .",
    "Viele Landwirte leiden unter der anhaltenden Trockenheit .",
    "Der Autor stellte sein neues Buch am Dienstag in Hamburg vor .",
    "Die Verhandlungen über den Vertrag sollen im Frühjahr fortgesetzt werden .",
    "Die Mannschaft muss in den nächsten Wochen auf ihren besten Spieler verzichten .",
    "Experten erwarten, dass die Wirtschaft im kommenden Jahr wieder wächst .",
)
SHORT_QUESTIONS = ("what is {t}", "who is best known for work on {t}?", "when did {t} begin",
                   "where did {t} start?", "why is {t} important", "what is the main idea behind {t}?",
                   "how does {t} work in short?", "what is one famous example of {t}")
PASSAGE_QUESTIONS = ("What is the {m} module used for, according to the text?",
                     "Describe the main functions of {m} mentioned above.",
                     "Based on the passage, what can a programmer do with {m}?")
NAMES = ("Maria", "James", "Aisha", "Tom", "Lena", "Carlos", "Mei", "Sam")
ITEMS = ("apples", "pencils", "cookies", "stickers", "marbles", "books", "cupcakes", "cards")
WORD_PROBLEMS = (
    "{n} has {a} {i}. She buys {b} packs with {c} {i} in each pack. How many {i} does she have now?",
    "{n} sells {i} for ${c} each. On Monday {n} sells {a} and on Tuesday {b} more than on Monday. "
    "How much money does {n} make in total?",
    "A class has {a} students. Each student brings {c} {i}, and the teacher brings {b} more. How many "
    "{i} are there altogether?",
    "{n} wants to save ${a}0. {n} saves ${c} a week and already has ${b}. How many weeks until {n} "
    "reaches the goal?",
    "A store gives a {p}% discount on a jacket that costs ${a}0. {n} also pays ${b} for shipping. "
    "How much does {n} pay?",
    "{n} reads {b} pages a day for {c} days, then {a} pages on the last day. How many pages did {n} read?",
)
ROLEPLAY = ("Pretend you are a famous scientist who studies {t}. Explain why your work matters.",
            "Imagine you are a tour guide. Describe {t} to a group of visitors.",
            "Act as a teacher and answer a student who asks: why should I care about {t}?",
            "You are a journalist. Write the opening of an interview with an expert on {t}.")


def _doc_sentences() -> list[str]:
    out = []
    for name in DOC_MODULES:
        doc = (importlib.import_module(name).__doc__ or "").replace("\n", " ")
        out += [s.strip().rstrip(".") + "." for s in doc.split(". ") if 40 <= len(s.strip()) <= 200][:3]
    return out


def default_prompts(seed: int = 0) -> list[str]:
    """Every prompt of the built-in set: the first set shuffled by ``seed``, then
    ``mixed_prompts(seed)`` (appended, so the first set's order never changes)."""
    prompts = [task.format(t=t) for t in TOPICS for task in TASKS] + list(QUESTIONS)
    for i, s in enumerate(_doc_sentences()):
        prompts.append(f"Translate into {LANGS[i % len(LANGS)]}: {s}")
        prompts.append(f"Summarize in one sentence and explain to a beginner: {s}")
    prompts = list(dict.fromkeys(prompts))
    random.Random(seed).shuffle(prompts)
    return list(dict.fromkeys(prompts + mixed_prompts(seed)))


def _passages() -> list[tuple[str, str]]:
    """(module name, a long stdlib docstring text: its module doc and its first classes' and
    functions' docs) for summaries and passage questions."""
    out = []
    for name in DOC_MODULES + DOC_MODULES_LONG:
        mod = importlib.import_module(name)
        own = [v for a, v in sorted(vars(mod).items())  # defined here (no deprecated aliases)
               if not a.startswith("_") and callable(v) and getattr(v, "__module__", "") == name]
        with warnings.catch_warnings():  # typing's deprecated aliases (typing.re) warn on access
            warnings.simplefilter("ignore", DeprecationWarning)
            parts = [mod.__doc__ or ""] + [v.__doc__ or "" for v in own][:8]
        text = " ".join(" ".join(p.split()) for p in parts if len(p) > 60)
        if len(text) > 400:
            out.append((name, text[:1600]))
    return out


def _word_problem(rng: random.Random) -> str:
    a, b, c = rng.randint(3, 40), rng.randint(2, 12), rng.randint(2, 9)
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    return rng.choice(WORD_PROBLEMS).format(n=name, i=item, a=a, b=b, c=c, p=rng.choice((10, 20, 25, 50)))


def mixed_prompts(seed: int = 0) -> list[str]:
    """Requests shaped like Spec-Bench's categories (module doc), shuffled by ``seed``."""
    rng = random.Random(seed)
    out = [f"Translate German to English: {g}" for g in GERMAN]
    out += [f"Translate German to English: {a} {b}" for a, b in zip(GERMAN, GERMAN[1:] + GERMAN[:1])]
    for name, text in _passages():
        out.append(f"Summarize: {text}")
        out.append(f"{text}\n{rng.choice(PASSAGE_QUESTIONS).format(m=name)}")
    out += [q.format(t=t) for t in TOPICS for q in rng.sample(SHORT_QUESTIONS, 2)]
    out += [_word_problem(rng) for _ in range(60)]
    out += [r.format(t=t) for t in rng.sample(TOPICS, 24) for r in rng.sample(ROLEPLAY, 1)]
    out = list(dict.fromkeys(out))
    rng.shuffle(out)
    return out


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
