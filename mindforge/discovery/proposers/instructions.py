"""Generated tasks a small model solves some of the time: instructions and small functions.

Both generators build the task and its reference from the same drawn
constants, so the reference is right by construction (the sandbox still
checks it). Difficulty is a dial: an instruction task stacks one to three
format constraints on a request; a function variant draws its constants,
argument type (numbers or text) and edge-case tests. A tiny model often gets
one constraint right and rarely three, so the batch spreads over the band.
"""

from __future__ import annotations

import random
from typing import Any

WORDS = ("apple", "river", "garden", "window", "candle", "forest", "pencil", "rocket", "bridge", "cloud",
         "orange", "silver", "mountain", "coffee", "winter", "music", "paper", "ocean", "tiger", "lemon")
TOPICS = ("the sea", "a dog", "the city", "rain", "breakfast", "a train", "the moon", "summer", "a library",
          "friendship", "a bicycle", "snow")
QUESTIONS = (("What color is the sky on a clear day?", ("blue",)), ("What is the opposite of hot?", ("cold",)),
             ("What animal says meow?", ("cat",)), ("How many legs does a dog have? Use digits.", ("4",)),
             ("What is the capital of France?", ("paris",)), ("What is frozen water called?", ("ice",)),
             ("Which planet do we live on?", ("earth",)), ("What color is grass?", ("green",)))


def _test(name: str, code: str) -> dict[str, str]:
    return {"name": name, "code": code}


def _constraint(kind: str, rng: random.Random) -> tuple[str, str, Any]:
    """(instruction text, checker code, parameter) for one format constraint."""
    if kind == "word":
        w = rng.choice(WORDS)
        return f"Include the word '{w}'.", f"assert '{w}' in answer.lower()", w
    if kind == "end":
        mark = rng.choice(("!", "?"))
        what = "an exclamation mark" if mark == "!" else "a question mark"
        return f"End your answer with {what}.", f"assert answer.strip().endswith('{mark}')", mark
    if kind == "lower":
        return "Use only lowercase letters.", "assert answer.strip() and answer == answer.lower()", None
    n = rng.randint(6, 12)
    return f"Use at most {n} words.", f"assert 0 < len(answer.split()) <= {n}", n


def instruction_task(rng: random.Random) -> dict[str, Any]:
    """A one-sentence request with 1–3 checkable constraints, or a one-word answer task."""
    style = rng.choice(("sentence", "sentence", "word", "echo_word", "sum"))
    if style == "word":
        q, answers = rng.choice(QUESTIONS)
        prompt = f"Answer with a single word and nothing else: {q}"
        test = f"assert answer.strip().strip('.!').lower() in {list(answers)!r}"
        return _text(prompt, [_test("answer", test), _test("one-word", "assert len(answer.split()) == 1")],
                     answers[0].capitalize())
    if style == "echo_word":
        w = rng.choice(WORDS)
        upper = rng.random() < 0.5
        prompt = f"Reply with only the word '{w}'" + (" in uppercase letters." if upper else ".")
        target = w.upper() if upper else w
        code = f"assert answer.strip().strip('.!') == '{target}'" if upper else \
            f"assert answer.strip().strip('.!').lower() == '{w}'"
        return _text(prompt, [_test("answer", code), _test("one-word", "assert len(answer.split()) == 1")], target)
    if style == "sum":
        a, b = rng.randint(2, 40), rng.randint(2, 40)
        prompt = f"What is {a} + {b}? Answer with the number only."
        return _text(prompt, [_test("answer", f"assert answer.strip().strip('.') == '{a + b}'")], str(a + b))
    topic = rng.choice(TOPICS)
    kinds = rng.sample(("word", "end", "lower", "length"), rng.randint(1, 3))
    if "length" not in kinds and "end" not in kinds:
        kinds.append("length")  # so the request itself, echoed back, does not pass
    parts = [_constraint(k, rng) for k in kinds]
    prompt = f"Write one sentence about {topic}. " + " ".join(p[0] for p in parts)
    tests = [_test(f"{k}", p[1]) for k, p in zip(kinds, parts, strict=True)]
    return _text(prompt, tests, _sentence(topic, dict(zip(kinds, (p[2] for p in parts), strict=True))))


def _sentence(topic: str, params: dict[str, Any]) -> str:
    words = topic.split() + (["and", "the", params["word"]] if "word" in params else []) + ["feel", "calm"]
    text = " ".join(words)
    text = text.lower() if "lower" in params else text[0].upper() + text[1:]
    return text + params.get("end", ".")


def _text(prompt: str, tests: list[dict[str, str]], reference: str) -> dict[str, Any]:
    return {"family": "L0", "prompt": prompt, "output_kind": "text", "tests": tests, "reference": reference}


# ------------------------------------------------------------------ function variants
def function_task(rng: random.Random) -> dict[str, Any]:
    """A small function with drawn constants, argument type and edge cases."""
    k = rng.randint(2, 9)
    kind = rng.choice(("add", "times", "repeat", "count_char", "multiple", "first_n", "last_n"))
    if kind == "add":
        ep, sig, doc, body = f"add_{k}", "x: int", f"returns x plus {k}", f"return x + {k}"
        cases = [(x, x + k) for x in (0, 1, -k, rng.randint(10, 99))]
    elif kind == "times":
        ep, sig, doc, body = f"times_{k}", "x: int", f"returns x multiplied by {k}", f"return x * {k}"
        cases = [(x, x * k) for x in (0, 1, -3, rng.randint(10, 99))]
    elif kind == "repeat":
        ep, sig, doc, body = f"repeat_{k}", "s: str", f"returns the string s repeated {k} times", f"return s * {k}"
        cases = [(s, s * k) for s in ("", "a", "ab", rng.choice(WORDS))]
    elif kind == "count_char":
        c = rng.choice("aeiou")
        ep, sig = f"count_{c}", "s: str"
        doc, body = f"returns how many times the letter '{c}' occurs in s", f"return s.count('{c}')"
        cases = [(s, s.count(c)) for s in ("", c * 3, f"x{c}y{c}", rng.choice(WORDS))]
    elif kind == "multiple":
        ep, sig = f"is_multiple_of_{k}", "n: int"
        doc, body = f"returns True when n is a multiple of {k}, else False", f"return n % {k} == 0"
        cases = [(n, n % k == 0) for n in (0, k, k + 1, 3 * k, -k)]
    else:
        side = "first" if kind == "first_n" else "last"
        ep, sig = f"{side}_{k}", "items: list"
        doc = f"returns the {side} {k} items of the list (all of them when it is shorter)"
        body = f"return items[:{k}]" if side == "first" else f"return items[-{k}:] if len(items) >= {k} else items[:]"
        data = list(range(1, k + 4))
        cases = [([], []), (data, data[:k] if side == "first" else data[-k:]), ([7], [7])]
    prompt = f"Write a Python function `{ep}({sig})` that {doc}."
    reference = f"def {ep}({sig.split(':')[0]}):\n    {body}\n"
    tests = [_test(f"{ep}-{i}", f"assert {ep}({a!r}) == {b!r}") for i, (a, b) in enumerate(cases, 1)]
    return {"family": "L2", "prompt": prompt, "output_kind": "function", "entry_point": ep,
            "tests": tests, "reference": reference}
