"""Flide on the live CPU server: ``/v1/decisions`` latency, packed vs SGLang's own route.

    python -m bench.scripts.decisions_live            # -> bench/results/decisions.md
    python -m bench.scripts.decisions_live --smoke    # the development set only, printed
    python -m bench.scripts.decisions_live --model lfm2_tiny   # -> bench/results/decisions_lfm2.md

Workload (the issue's): one decision request of 32 questions over a shared
context of 2,048 tokens. Contexts are real English text, the documentation of
Python standard-library modules (``pydoc`` text of the module and its public
members), cut at exactly 2,048 tokens of the served tokenizer (the rendered
prompt adds the chat template around it). The 32 questions mix the three kinds
``/v1/decisions`` takes (yes/no, choice among four, score on five levels) about
terms of the text, built from fixed templates; each rendered question suffix is
~30 tokens. Question sets: ``DEV`` was used while writing this script and is
not reported; the table reports ``EVAL`` only.

Rows: one server each (float32 SmolLM2-135M, one thread, SGLang's default
flags on CPU; every row under the same flags): ``+decisions=separate``
(SGLang's route, ``fcfs``), ``+decisions=separate
decisions.in_batch_prefix_caching=true`` (SGLang's ``lpm``), ``+decisions=flide``.
Per set, ``REPEATS`` requests one at a time (after one untimed warm-up
request on ``DEV`` per server), the prefix cache flushed before each
(``/flush_cache``), so every request computes its context; the cell is
the median latency (client wall time: it includes rendering and tokenizing
the prompts, which the stock rows do per prompt and ``flide`` once for the
shared input, ``server/sglang/decisions/encoding.py``). The answers of every row are checked
equal (each question's prompt ids, and its probabilities within 1e-5 of the first row's), so the
rows compute the same thing.

Targets (issue 28, SmolLM2): ``flide`` <= 1/5 of the ``fcfs`` row and <= 1/1.5
of the ``lpm`` row (the best built-in on the CPU server: SGLang's multi-item
scoring needs FlashInfer and ``/v1/decisions`` refuses it).

``--model lfm2_tiny``: the same rows on the tiny random hybrid LFM2 (short
convolutions + attention, ``conf/model/lfm2_tiny.yaml``; SmolLM2's tokenizer, so
the same contexts and questions), whose recurrent state SGLang caches only at
request ends: a stock question cannot resume from the shared context's state and
recomputes it. Target: ``flide`` at least 5x faster than the better stock row.
Its short convolutions run on Switchboard's torch CPU kernels
(``server/sglang/launch/conv_kernels.py``).
"""

from __future__ import annotations

import argparse
import pydoc
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench.live.server import ServerProcess
from bench.scripts.common import add_output_args, git_commit

CONTEXT_TOKENS = 2048
QUESTIONS = 32
REPEATS = 2
BASE = ("model.dtype=float32", "sglang.sleep_on_idle=true")
DEV = ("argparse",)
EVAL = ("logging", "unittest", "http.client")
#: ``--model`` -> (server overrides, the table it writes).
MODELS = {"smollm2": ((), "decisions"), "lfm2_tiny": (("model=lfm2_tiny",), "decisions_lfm2")}
ROWS = (("SGLang /v1/decisions, fcfs", ["+decisions=separate"]),
        ("SGLang /v1/decisions, lpm", ["+decisions=separate", "decisions.in_batch_prefix_caching=true"]),
        ("flide", ["+decisions=flide"]))
TERMS = ("error handling", "configuration", "a class", "threads", "a file", "the network", "encoding",
         "a callback", "a default value", "inheritance", "a timeout", "formatting", "a header", "a test case",
         "a string", "an exception")


def context_text(module: str, tokenizer: Any) -> str:
    """The module's documentation, cut at ``CONTEXT_TOKENS`` tokens."""
    text = pydoc.render_doc(module, renderer=pydoc.plaintext)  # type: ignore[attr-defined]
    ids = tokenizer(text, add_special_tokens=False).input_ids[:CONTEXT_TOKENS]
    if len(ids) < CONTEXT_TOKENS:
        raise ValueError(f"{module}: only {len(ids)} tokens of documentation")
    return str(tokenizer.decode(ids))


def questions() -> list[dict[str, Any]]:
    """32 questions, the three kinds in turn, about ``TERMS``."""
    out: list[dict[str, Any]] = []
    for i in range(QUESTIONS):
        term = TERMS[i % len(TERMS)]
        kind = i % 3
        if kind == 0:
            out.append({"type": "yes_no", "id": f"q{i}", "question": f"Does the text explain {term}?"})
        elif kind == 1:
            out.append({"type": "choice", "id": f"q{i}", "question": f"Where in the text is {term} mentioned?",
                        "options": [{"name": n} for n in ("the beginning", "the middle", "the end", "nowhere")]})
        else:
            out.append({"type": "score", "id": f"q{i}", "question": f"How important is {term} in the text?",
                        "levels": ["not at all", "slightly", "somewhat", "very", "central"]})
    return out


def timed_decision(base_url: str, text: str) -> tuple[float, dict[str, Any]]:
    """One request after a cache flush: (seconds, answers)."""
    httpx.post(base_url + "/flush_cache", timeout=60).raise_for_status()
    t0 = time.perf_counter()
    r = httpx.post(base_url + "/v1/decisions", timeout=3600,
                   json={"input": text, "questions": questions(), "return_prompt_token_ids": True})
    seconds = time.perf_counter() - t0
    r.raise_for_status()
    return seconds, r.json()


def same_answers(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """The same prompt ids and, within 1e-5, the same probabilities for every question."""
    return all(ans["prompt_token_ids"] == b["answers"][qid]["prompt_token_ids"] for qid, ans in a["answers"].items()) \
        and all(abs(p - b["answers"][qid]["probabilities"][name]) <= 1e-5
                for qid, ans in a["answers"].items() for name, p in ans["probabilities"].items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="smollm2")
    parser.add_argument("--smoke", action="store_true", help="the development set, one repeat, printed only")
    args, _ = parser.parse_known_args()
    model, table = MODELS[args.model]
    add_output_args(parser, table, f"{table}_live")
    args = parser.parse_args()
    from transformers import AutoTokenizer

    commit = git_commit()
    t0 = time.monotonic()
    sets = DEV if args.smoke else EVAL
    repeats = 1 if args.smoke else REPEATS
    latency: dict[str, dict[str, float]] = {}
    reference: dict[str, dict[str, Any]] = {}
    suffix_tokens: list[int] = []
    with tempfile.TemporaryDirectory() as tmp:
        for n, (name, overrides) in enumerate(ROWS):
            with ServerProcess([*BASE, *model, *overrides], Path(tmp) / f"{n}.log") as server:
                if not latency:
                    info = httpx.get(server.base_url + "/model_info", timeout=60).json()
                    tokenizer = AutoTokenizer.from_pretrained(info["tokenizer_path"])
                    texts = {m: context_text(m, tokenizer) for m in {*sets, *DEV}}
                # NOTE: one untimed request on the development set first: a fresh server's first
                # request pays one-time costs (first kernels of each shape) that no set should carry
                timed_decision(server.base_url, texts[DEV[0]])
                latency[name] = {}
                for module in sets:
                    runs = [timed_decision(server.base_url, texts[module]) for _ in range(repeats)]
                    latency[name][module] = statistics.median(s for s, _ in runs)
                    answer = runs[0][1]
                    if module not in reference:
                        reference[module] = answer
                        prompts = [a["prompt_token_ids"] for a in answer["answers"].values()]
                        shared = next(i for i in range(min(map(len, prompts))) if len({p[i] for p in prompts}) > 1)
                        suffix_tokens += [len(p) - shared for p in prompts]
                    elif not same_answers(answer, reference[module]):
                        raise SystemExit(f"{name} / {module}: answers differ from {ROWS[0][0]}'s")
                    print(f"{name} / {module}: {latency[name][module]:.2f} s", flush=True)
    if args.smoke:
        return
    args.out.write_text(report(latency, suffix_tokens, commit, time.monotonic() - t0, args.model))
    print(f"wrote {args.out}")


def report(latency: dict[str, dict[str, float]], suffix_tokens: list[int], commit: str, wall_s: float,
           model: str = "smollm2") -> str:
    fcfs, lpm, flide = (latency[name] for name, _ in ROWS)
    lfm2 = model == "lfm2_tiny"
    flags = " --model lfm2_tiny" if lfm2 else ""
    title = "Flide on the live CPU server" + (": the tiny hybrid LFM2" if lfm2 else "")
    served = ("`model=lfm2_tiny` (a tiny random LFM2: short convolutions + attention, float32; SGLang caches "
              "its recurrent state only at request ends)" if lfm2 else "SmolLM2-135M, float32")
    out = [f"# {title}\n\nBuilt by `python -m bench.scripts.decisions_live{flags}` at commit {commit}, "
           f"{datetime.now(UTC):%Y-%m-%d}. Method: the script's docstring. Served: {served}. One "
           f"`/v1/decisions` request of "
           f"{QUESTIONS} questions over {CONTEXT_TOKENS} tokens of context, prefix cache flushed, median of "
           f"{REPEATS}; question suffixes {statistics.mean(suffix_tokens):.0f} tokens on average "
           f"({min(suffix_tokens)}-{max(suffix_tokens)}). Seconds; in brackets, x the flide row.\n",
           "| row | " + " | ".join(f"`{m}`" for m in EVAL) + " |", "|---|" + "---:|" * len(EVAL)]
    for name, _ in ROWS:
        out.append(f"| {name} | " + " | ".join(f"{latency[name][m]:.2f} ({latency[name][m] / flide[m]:.2f}x)"
                                                for m in EVAL) + " |")
    out.append("\n## Checks against the issue's targets\n")
    for m in EVAL:
        if lfm2:
            best = min(fcfs[m], lpm[m])
            ok = flide[m] * 5.0 <= best
            out.append(f"- `{m}`: flide >= 5x faster than the better stock row ({best / flide[m]:.1f}x): "
                       f"{'met' if ok else 'MISSED'}")
            continue
        for base, bound, label in ((fcfs, 5.0, "fcfs"), (lpm, 1.5, "lpm")):
            ok = flide[m] * bound <= base[m]
            out.append(f"- `{m}`: flide <= 1/{bound:g} of {label} ({flide[m] / base[m]:.2f}): "
                       f"{'met' if ok else 'MISSED'}")
    out.append("\nEvery row's prompt ids equal the first row's, and its answers within 1e-5. "
               f"Wall time {wall_s / 60:.0f} min.\n")
    return "\n".join(out)


if __name__ == "__main__":
    main()
