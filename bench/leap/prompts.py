"""The LEAP prompt set: generated here from templates, shipped with the project.

No public prompt set can be fetched on these machines (no model hubs), so the
set is built deterministically from task templates whose natural answers range
from a word to several paragraphs (yes/no questions, definitions, lists of N
items, explanations, step-by-step instructions, letters, stories, code), over a
few dozen topics. The *true* output length of each prompt is what the serving
model itself generates for it (greedy, up to a cap), measured live, never
assumed from the template.

NOTE: two splits by topic: the head is trained (``leap_curve``) on ``train``
topics only and judged live (``leap_live``) on ``eval`` topics it never saw.
"""

from __future__ import annotations

import random

TOPICS = (
    "volcanoes", "the moon", "coffee", "bicycles", "honeybees", "the Roman empire", "glaciers",
    "electric cars", "photosynthesis", "chess", "jazz", "the internet", "rainforests", "sleep",
    "the ocean tides", "bread baking", "solar panels", "whales", "democracy", "vaccines",
    "earthquakes", "the printing press", "gardening", "rivers", "black holes", "recycling",
    "the piano", "deserts", "friendship", "mountains", "trains", "spiders", "tea", "libraries",
)

#: (template, rough answer length it invites) — the label is documentation only.
TEMPLATES = (
    ("Answer yes or no: is {t} older than one hundred years?", "a word"),
    ("In one word, what color do you associate with {t}?", "a word"),
    ("Give a one-sentence definition of {t}.", "a sentence"),
    ("What is the most surprising fact about {t}? Answer briefly.", "a sentence"),
    ("List {n} facts about {t}.", "n lines"),
    ("Name {n} words related to {t}, separated by commas.", "n words"),
    ("Explain {t} to a ten-year-old.", "a paragraph"),
    ("What are the advantages and disadvantages of {t}?", "paragraphs"),
    ("Write step-by-step instructions for learning about {t}.", "a list"),
    ("Write a short poem about {t}.", "a few lines"),
    ("Write a letter to a friend describing {t}.", "paragraphs"),
    ("Tell a story about a child who discovers {t}.", "paragraphs"),
    ("Write a detailed essay about the history of {t}.", "long"),
    ("Write a Python function related to {t} and explain it.", "code"),
    ("Summarize what everyone should know about {t} in three sentences.", "three sentences"),
)


#: Topics of each split (``eval`` topics never reach the head's training).
SPLITS = {"train": TOPICS[:26], "eval": TOPICS[26:]}
COUNTS = (3, 5, 8, 12)


def distinct_prompts(split: str) -> int:
    """How many distinct prompts ``split`` has."""
    per_topic = sum(len(COUNTS) if "{n}" in t else 1 for t, _ in TEMPLATES)
    return per_topic * len(SPLITS[split])


def leap_prompts(n: int, seed: int = 0, split: str = "train") -> list[str]:
    """``n`` distinct prompts on ``split``'s topics, the same for the same ``seed``."""
    if n > distinct_prompts(split):
        raise ValueError(f"only {distinct_prompts(split)} distinct {split} prompts exist; asked for {n}")
    rng = random.Random(seed)
    topics = SPLITS[split]
    seen: set[str] = set()
    out: list[str] = []
    while len(out) < n:
        template, _ = rng.choice(TEMPLATES)
        prompt = template.format(t=rng.choice(topics), n=rng.choice(COUNTS))
        if prompt not in seen:
            seen.add(prompt)
            out.append(prompt)
    return out
