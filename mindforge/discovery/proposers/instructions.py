"""Generated tasks a small model solves some of the time: instructions, small functions, UI fragments.

Each generator builds the task and its reference from the same drawn
constants, so the reference is right by construction (the sandbox still
checks it), and each takes a ``level`` (1 to ``LEVELS``), the dial Discovery's
staircase turns. Levels are small steps, because a small model's solve rate
jumps from all to nothing between neighbouring kinds (SmolLM2-135M: every
``add_k`` solved, every ``first_k`` failed, ``count_c`` about half):

- instruction: a word-count range; plus one more constraint; three
  constraints; three constraints or an exact one-word answer;
- function: one arithmetic or string step; a count, a test or an index; a
  slice, chunk, rotation or padding; a filter, a pair count or a search
  (six or seven kinds a level, each with a drawn constant: see
  ``FUNCTION_KINDS``);
- UI: one element with its text; one element with two attributes; an input
  with its label; a list or a small labelled form.
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
    n = rng.randint(6, 9)  # below the request's own length, so echoing it back fails
    return f"Use between 3 and {n} words.", f"assert 3 <= len(answer.split()) <= {n}", n


LEVELS = 4


def instruction_task(rng: random.Random, level: int = 2) -> dict[str, Any]:
    """A one-sentence request with checkable constraints; level 4 also draws exact one-word answer tasks."""
    style = rng.choice(("sentence", "sentence", "word", "echo_word", "sum")) if level >= 4 else "sentence"
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
    if level <= 2:  # a word-count range: a small model meets it some of the time; an echo or "OK" does not
        kinds = ["length"] + ([rng.choice(("word", "end", "lower"))] if level == 2 else [])
    else:
        kinds = rng.sample(("word", "end", "lower", "length"), 3)
        if "length" not in kinds and "end" not in kinds:
            kinds[-1] = "length"  # so the request itself, echoed back, does not pass
    parts = [_constraint(k, rng) for k in kinds]
    prompt = f"Write one sentence about {topic}. " + " ".join(p[0] for p in parts)
    tests = [_test(f"{k}", p[1]) for k, p in zip(kinds, parts, strict=True)]
    return _text(prompt, tests, _sentence(topic, dict(zip(kinds, (p[2] for p in parts), strict=True))))


def _sentence(topic: str, params: dict[str, Any]) -> str:
    words = topic.split() + (["loves", params["word"]] if "word" in params else ["is", "calm"])  # <= 4 words
    text = " ".join(words)
    text = text.lower() if "lower" in params else text[0].upper() + text[1:]
    return text + params.get("end", ".")


def _text(prompt: str, tests: list[dict[str, str]], reference: str) -> dict[str, Any]:
    return {"family": "L0", "prompt": prompt, "output_kind": "text", "tests": tests, "reference": reference}


# ------------------------------------------------------------------ function variants
# A variant: (entry point, signature, what it returns, reference body, [(argument, expected)]). Every kind
# draws a constant (or a letter, or a word), so one kind yields several distinct tasks; the kinds of a level
# are of one difficulty for a small model. The expected values are computed here from the same constants.
Variant = tuple[str, str, str, str, list[tuple[Any, Any]]]


def _add(rng: random.Random, k: int) -> Variant:
    return f"add_{k}", "x: int", f"returns x plus {k}", f"return x + {k}", \
        [(x, x + k) for x in (0, 1, -k, rng.randint(10, 99))]


def _times(rng: random.Random, k: int) -> Variant:
    return f"times_{k}", "x: int", f"returns x multiplied by {k}", f"return x * {k}", \
        [(x, x * k) for x in (0, 1, -3, rng.randint(10, 99))]


def _repeat(rng: random.Random, k: int) -> Variant:
    return f"repeat_{k}", "s: str", f"returns the string s repeated {k} times", f"return s * {k}", \
        [(s, s * k) for s in ("", "a", "ab", rng.choice(WORDS))]


def _minus(rng: random.Random, k: int) -> Variant:
    return f"minus_{k}", "x: int", f"returns x minus {k}", f"return x - {k}", \
        [(x, x - k) for x in (0, k, 1, rng.randint(10, 99))]


def _prefix(rng: random.Random, k: int) -> Variant:
    w = rng.choice(WORDS)
    return f"prefix_{w}", "s: str", f"returns the string '{w}' followed directly by s", f"return '{w}' + s", \
        [(s, w + s) for s in ("", "x", " end", rng.choice(WORDS))]


def _floor_div(rng: random.Random, k: int) -> Variant:
    return f"divide_by_{k}", "x: int", f"returns x divided by {k}, rounded down to a whole number (x // {k})", \
        f"return x // {k}", [(x, x // k) for x in (0, k, k + 1, 5 * k - 1, rng.randint(50, 99))]


def _count_char(rng: random.Random, k: int) -> Variant:
    c = rng.choice("aeiou")
    return f"count_{c}", "s: str", f"returns how many times the letter '{c}' occurs in s", \
        f"return s.count('{c}')", [(s, s.count(c)) for s in ("", c * 3, f"x{c}y{c}", rng.choice(WORDS))]


def _multiple(rng: random.Random, k: int) -> Variant:
    return f"is_multiple_of_{k}", "n: int", f"returns True when n is a multiple of {k}, else False", \
        f"return n % {k} == 0", [(n, n % k == 0) for n in (0, k, k + 1, 3 * k, -k)]


def _count_above(rng: random.Random, k: int) -> Variant:
    data = [k - 1, k, k + 1, 2 * k, -k]
    return f"count_above_{k}", "items: list", f"returns how many numbers in the list are greater than {k}", \
        f"return sum(1 for x in items if x > {k})", \
        [(xs, sum(1 for x in xs if x > k)) for xs in ([], data, [k], [k + 5, k + 6])]


def _ends_with(rng: random.Random, k: int) -> Variant:
    c = rng.choice("aeinrst")
    words = ("", c, f"ab{c}", f"{c}ab", rng.choice(WORDS))
    return f"ends_with_{c}", "s: str", f"returns True when the string s ends with the letter '{c}', else False", \
        f"return s.endswith('{c}')", [(w, w.endswith(c)) for w in words]


def _replace_char(rng: random.Random, k: int) -> Variant:
    a, b = rng.sample("aeiou", 2)
    words = ("", a * 2, f"x{a}y", rng.choice(WORDS), "zzz")
    return f"replace_{a}_with_{b}", "s: str", f"returns s with every letter '{a}' replaced by '{b}'", \
        f"return s.replace('{a}', '{b}')", [(w, w.replace(a, b)) for w in words]


def _char_at(rng: random.Random, k: int) -> Variant:
    words = ("", "ab", "x" * k + "y", rng.choice(WORDS) + "abcdefghij")
    return f"char_at_{k}", "s: str", (f"returns the character at index {k} of s, or an empty string when s is " \
        f"shorter"), f"return s[{k}] if len(s) > {k} else ''", [(w, w[k] if len(w) > k else "") for w in words]


def _first_last(side: str) -> Any:
    def build(rng: random.Random, k: int) -> Variant:
        body = f"return items[:{k}]" if side == "first" else f"return items[-{k}:] if len(items) >= {k} else items[:]"
        data = list(range(1, k + 4))
        return f"{side}_{k}", "items: list", (f"returns the {side} {k} items of the list (all of them when it is " \
            f"shorter)"), body, [([], []), (data, data[:k] if side == "first" else data[-k:]), ([7], [7])]
    return build


def _clamp(rng: random.Random, k: int) -> Variant:
    lo, hi = -k, k * 3
    return f"clamp_{k}", "x: int", (f"returns x limited to the range {lo} to {hi} (values below {lo} become {lo}, " \
        f"above {hi} become {hi})"), f"return max({lo}, min({hi}, x))", \
        [(x, max(lo, min(hi, x))) for x in (0, lo - 5, hi + 1, hi, k)]


def _chunks(rng: random.Random, k: int) -> Variant:
    def cut(xs: list) -> list:
        return [xs[i:i + k] for i in range(0, len(xs), k)]
    data = list(range(1, 2 * k + 2))
    return f"chunks_of_{k}", "items: list", (f"returns the list split into consecutive lists of {k} items (the last " \
        f"one may be shorter)"), f"return [items[i:i + {k}] for i in range(0, len(items), {k})]", \
        [([], []), (data, cut(data)), ([9], [[9]])]


def _every_kth(rng: random.Random, k: int) -> Variant:
    data = list(range(10, 10 + 3 * k + 1))
    return f"every_{k}th", "items: list", (f"returns every {k}th item of the list, starting with the first " \
        f"(items[0], items[{k}], ...)"), f"return items[::{k}]", [([], []), (data, data[::k]), ([4, 5], [4])]


def _rotate(rng: random.Random, k: int) -> Variant:
    def rot(xs: list) -> list:
        return xs[k % len(xs):] + xs[:k % len(xs)] if xs else []
    data = list(range(1, k + 3))
    return f"rotate_left_{k}", "items: list", (f"returns the list rotated left by {k} positions (the first item " \
        f"moves to the end, {k} times); an empty list stays empty"), \
        f"return items[{k} % len(items):] + items[:{k} % len(items)] if items else []", \
        [([], []), (data, rot(data)), ([1, 2, 3], rot([1, 2, 3]))]


def _zero_pad(rng: random.Random, k: int) -> Variant:
    return f"zero_pad_{k}", "n: int", (f"returns the non-negative number n as a string, padded on the left with " \
        f"zeros to at least {k} characters"), f"return str(n).zfill({k})", \
        [(n, str(n).zfill(k)) for n in (0, 7, 10 ** k, rng.randint(10, 99))]


def _sum_multiples(rng: random.Random, k: int) -> Variant:
    data = [1, k, k + 1, 2 * k, 3 * k + 1, -k]
    return f"sum_multiples_of_{k}", "items: list", (f"returns the sum of the numbers in the list that are " \
        f"multiples of {k}"), f"return sum(x for x in items if x % {k} == 0)", \
        [(xs, sum(x for x in xs if x % k == 0)) for xs in ([], data, [k + 1], [0, k * 5])]


def _long_words(rng: random.Random, k: int) -> Variant:
    texts = ("", " ".join(rng.sample(WORDS, 5)), "a " + "b" * (k + 1), "x" * k)
    return f"words_longer_than_{k}", "text: str", (f"returns the list of words in text (split on spaces) that have " \
        f"more than {k} letters, in order"), f"return [w for w in text.split() if len(w) > {k}]", \
        [(t, [w for w in t.split() if len(w) > k]) for t in texts]


def _words_with(rng: random.Random, k: int) -> Variant:
    c = rng.choice("aeiorst")
    texts = ("", " ".join(rng.sample(WORDS, 6)), f"{c}{c} x{c} yy", "zz")
    return f"words_with_{c}", "text: str", (f"returns how many words of text (split on spaces) contain the letter " \
        f"'{c}'"), f"return sum(1 for w in text.split() if '{c}' in w)", \
        [(t, sum(1 for w in t.split() if c in w)) for t in texts]


def _drop_multiples(rng: random.Random, k: int) -> Variant:
    data = [1, k, k + 1, 2 * k, 2 * k + 1, 0]
    return f"drop_multiples_of_{k}", "items: list", (f"returns the numbers of the list that are not multiples of " \
        f"{k}, in order"), f"return [x for x in items if x % {k} != 0]", \
        [(xs, [x for x in xs if x % k != 0]) for xs in ([], data, [k, 2 * k], [k + 2])]


def _pairs_summing(rng: random.Random, k: int) -> Variant:
    def pairs(xs: list) -> int:
        return sum(1 for i in range(len(xs)) for j in range(i + 1, len(xs)) if xs[i] + xs[j] == k)
    data = [1, k - 1, 2, k - 2, k, 0]
    return f"pairs_summing_to_{k}", "items: list", (f"returns how many pairs of positions i < j have items[i] + " \
        f"items[j] == {k}"), (f"return sum(1 for i in range(len(items)) for j in range(i + 1, len(items)) " \
        f"if items[i] + items[j] == {k})"), [(xs, pairs(xs)) for xs in ([], data, [k], [k, 0, 0])]


def _first_above(rng: random.Random, k: int) -> Variant:
    def first(xs: list) -> int:
        return next((i for i, x in enumerate(xs) if x > k), -1)
    return f"index_above_{k}", "items: list", (f"returns the index of the first number in the list greater than " \
        f"{k}, or -1 when there is none"), f"return next((i for i, x in enumerate(items) if x > {k}), -1)", \
        [(xs, first(xs)) for xs in ([], [k, k + 1], [0, 1, k + 5, k + 9], [k - 1])]


def _square_plus(rng: random.Random, k: int) -> Variant:
    return f"square_plus_{k}", "x: int", f"returns x squared plus {k}", f"return x * x + {k}", \
        [(x, x * x + k) for x in (0, 1, -3, rng.randint(4, 12))]


def _distance_to(rng: random.Random, k: int) -> Variant:
    return f"distance_to_{k}", "x: int", f"returns how far x is from {k} (the absolute value of x - {k})", \
        f"return abs(x - {k})", [(x, abs(x - k)) for x in (k, 0, k + 3, -4)]


def _sum_plus(rng: random.Random, k: int) -> Variant:
    return f"sum_plus_{k}", "items: list", f"returns the sum of the numbers in the list plus {k}", \
        f"return sum(items) + {k}", [(xs, sum(xs) + k) for xs in ([], [1, 2, 3], [-k], [rng.randint(5, 50), 7])]


def _max_times(rng: random.Random, k: int) -> Variant:
    return f"largest_times_{k}", "items: list", (f"returns the largest number in the non-empty list " \
        f"multiplied by {k}"), f"return max(items) * {k}", \
        [(xs, max(xs) * k) for xs in ([1], [3, 9, 2], [-5, -2], [rng.randint(10, 99), 4])]


def _count_equal(rng: random.Random, k: int) -> Variant:
    return f"count_equal_{k}", "items: list", f"returns how many items of the list are equal to {k}", \
        f"return items.count({k})", [(xs, xs.count(k)) for xs in ([], [k], [k, 1, k, k + 1], [0, 2 * k])]


def _remove_char(rng: random.Random, k: int) -> Variant:
    c = rng.choice("aeiou")
    words = ("", c * 2, f"x{c}y", rng.choice(WORDS), "zzz")
    return f"remove_{c}", "s: str", f"returns s with every letter '{c}' removed", f"return s.replace('{c}', '')", \
        [(w, w.replace(c, "")) for w in words]


def _count_digits(rng: random.Random, k: int) -> Variant:
    texts = ("", "abc", "a1b22", f"{rng.randint(100, 999)} apples")
    return "count_digits", "s: str", "returns how many characters of s are digits (0-9)", \
        "return sum(1 for ch in s if ch.isdigit())", [(t, sum(1 for ch in t if ch.isdigit())) for t in texts]


def _count_upper(rng: random.Random, k: int) -> Variant:
    texts = ("", "abc", "HeLLo", rng.choice(WORDS).capitalize() + " X")
    return "count_uppercase", "s: str", "returns how many characters of s are uppercase letters", \
        "return sum(1 for ch in s if ch.isupper())", [(t, sum(1 for ch in t if ch.isupper())) for t in texts]


def _count_words(rng: random.Random, k: int) -> Variant:
    texts = ("", "one", " ".join(rng.sample(WORDS, k)), "a  b   c")
    return f"count_words_plus_{k}", "text: str", (f"returns the number of words in text (split on whitespace) " \
        f"plus {k}"), f"return len(text.split()) + {k}", [(t, len(t.split()) + k) for t in texts]


def _longer_than(rng: random.Random, k: int) -> Variant:
    words = ("", "x" * k, "y" * (k + 1), rng.choice(WORDS) * 2)
    return f"is_longer_than_{k}", "s: str", f"returns True when s has more than {k} characters, else False", \
        f"return len(s) > {k}", [(w, len(w) > k) for w in words]


def _between(rng: random.Random, k: int) -> Variant:
    lo, hi = k, k * 4
    return f"is_between_{lo}_and_{hi}", "x: int", (f"returns True when x is between {lo} and {hi} " \
        f"(both included), else False"), f"return {lo} <= x <= {hi}", \
        [(x, lo <= x <= hi) for x in (lo, hi, lo - 1, hi + 1, 0, lo + 1)]


def _starts_with(rng: random.Random, k: int) -> Variant:
    c = rng.choice("bcdmpst")
    words = ("", c, f"{c}ab", f"ab{c}", rng.choice(WORDS))
    return f"starts_with_{c}", "s: str", (f"returns True when the string s starts with the letter '{c}', " \
        f"else False"), f"return s.startswith('{c}')", [(w, w.startswith(c)) for w in words]


def _add_each(rng: random.Random, k: int) -> Variant:
    return f"add_{k}_to_each", "items: list", f"returns a new list with {k} added to every number of the list", \
        f"return [x + {k} for x in items]", [(xs, [x + k for x in xs]) for xs in ([], [0], [1, 2, 3], [-k, 10])]


def _join_with(rng: random.Random, k: int) -> Variant:
    sep = rng.choice(("-", "+", "/", ", ", "_"))
    name = {"-": "dashes", "+": "plus_signs", "/": "slashes", ", ": "commas", "_": "underscores"}[sep]
    return f"join_with_{name}", "words: list", f"returns the strings of the list joined with {sep!r} between them", \
        f"return {sep!r}.join(words)", [(ws, sep.join(ws)) for ws in ([], ["a"], ["x", "y"], rng.sample(WORDS, 3))]


def _reverse_words(rng: random.Random, k: int) -> Variant:
    texts = ("", "one", "one two", " ".join(rng.sample(WORDS, 3)))
    return "reverse_word_order", "text: str", ("returns the words of text (split on spaces) in reverse order, " \
        "joined by single spaces"), "return ' '.join(text.split()[::-1])", \
        [(t, " ".join(t.split()[::-1])) for t in texts]


def _last_char(rng: random.Random, k: int) -> Variant:
    words = ("", "a", "ab", rng.choice(WORDS))
    return "last_character", "s: str", "returns the last character of s, or an empty string when s is empty", \
        "return s[-1] if s else ''", [(w, w[-1] if w else "") for w in words]


def _keep_longer(rng: random.Random, k: int) -> Variant:
    words = rng.sample(WORDS, 4)
    return f"strings_longer_than_{k}", "words: list", (f"returns the strings of the list that have more than " \
        f"{k} characters, in order"), f"return [w for w in words if len(w) > {k}]", \
        [(ws, [w for w in ws if len(w) > k]) for ws in ([], ["x" * (k + 1)], ["a", "b" * k], words)]


def _count_even(rng: random.Random, k: int) -> Variant:
    data = list(range(k, k + 5))
    return "count_even", "items: list", "returns how many numbers in the list are even", \
        "return sum(1 for x in items if x % 2 == 0)", \
        [(xs, sum(1 for x in xs if x % 2 == 0)) for xs in ([], [1], [2, 4, 5], data)]


def _capitalize_words(rng: random.Random, k: int) -> Variant:
    texts = ("", "a", "hello world", " ".join(rng.sample(WORDS, 3)))
    return "capitalize_words", "text: str", ("returns text with the first letter of every word in uppercase " \
        "(words split on spaces, joined by single spaces)"), \
        "return ' '.join(w[:1].upper() + w[1:] for w in text.split())", \
        [(t, " ".join(w[:1].upper() + w[1:] for w in t.split())) for t in texts]


FUNCTION_KINDS: dict[int, dict[str, Any]] = {
    1: {"add": _add, "times": _times, "repeat": _repeat, "minus": _minus, "prefix": _prefix,
        "floor_div": _floor_div, "square_plus": _square_plus, "starts_with": _starts_with},
    2: {"count_char": _count_char, "multiple": _multiple, "count_above": _count_above, "ends_with": _ends_with,
        "replace_char": _replace_char, "char_at": _char_at, "distance_to": _distance_to, "sum_plus": _sum_plus,
        "count_equal": _count_equal, "remove_char": _remove_char, "longer_than": _longer_than,
        "between": _between, "max_times": _max_times},
    3: {"first_n": _first_last("first"), "last_n": _first_last("last"), "clamp": _clamp, "chunks": _chunks,
        "every_kth": _every_kth, "rotate": _rotate, "zero_pad": _zero_pad, "count_digits": _count_digits,
        "count_upper": _count_upper, "count_words": _count_words, "add_each": _add_each, "join_with": _join_with,
        "last_char": _last_char, "count_even": _count_even},
    4: {"sum_multiples": _sum_multiples, "long_words": _long_words, "words_with": _words_with,
        "drop_multiples": _drop_multiples, "pairs_summing": _pairs_summing, "first_above": _first_above,
        "reverse_words": _reverse_words, "keep_longer": _keep_longer, "capitalize_words": _capitalize_words},
}
VARIANT_LEVEL = {name: level for level, kinds in FUNCTION_KINDS.items() for name in kinds}


def function_task(rng: random.Random, level: int = 2, kind: str | None = None) -> dict[str, Any]:
    """A small function with drawn constants and edge cases; ``level`` picks the kinds (``FUNCTION_KINDS``),
    ``kind`` one of them (tests)."""
    k = rng.randint(2, 9)
    kinds = FUNCTION_KINDS[max(1, min(level, LEVELS))]
    ep, sig, doc, body, cases = kinds[kind or rng.choice(sorted(kinds))](rng, k)
    prompt = f"Write a Python function `{ep}({sig})` that {doc}."
    reference = f"def {ep}({sig.split(':')[0]}):\n    {body}\n"
    tests = [_test(f"{ep}-{i}", f"assert {ep}({a!r}) == {b!r}") for i, (a, b) in enumerate(cases, 1)]
    return {"family": "L2", "prompt": prompt, "output_kind": "function", "entry_point": ep,
            "tests": tests, "reference": reference}


# ------------------------------------------------------------------ UI fragments
LABELS = ("Save", "Cancel", "Send", "Search", "Next", "Delete", "Open", "Close", "Submit", "Reset")
FIELDS = (("email", "email", "Email"), ("name", "text", "Name"), ("age", "number", "Age"),
          ("phone", "tel", "Phone"), ("password", "password", "Password"), ("website", "url", "Website"))


def ui_task(rng: random.Random, level: int = 2) -> dict[str, Any]:
    """An HTML fragment with checkable elements, ids and labels; ``level`` sets how many parts it has."""
    if level <= 1:
        if rng.random() < 0.5:
            label = rng.choice(LABELS)
            prompt = f"Write the HTML for a button whose text is '{label}'."
            tests = [_test("button", f"b = dom.find('button')\nassert b and b.text() == {label!r}")]
            return _html(prompt, tests, f"<button>{label}</button>")
        word = rng.choice(WORDS)
        prompt = f"Write the HTML for a level-one heading with the text '{word.capitalize()}'."
        tests = [_test("heading", f"h = dom.find('h1')\nassert h and h.text() == {word.capitalize()!r}")]
        return _html(prompt, tests, f"<h1>{word.capitalize()}</h1>")
    if level == 2:
        if rng.random() < 0.5:
            fid, kind, _ = rng.choice(FIELDS)
            prompt = f"Write the HTML for an input element with id '{fid}' and type '{kind}'."
            tests = [_test("input", f"i = dom.find('input', id={fid!r})\nassert i and i.get('type') == {kind!r}")]
            return _html(prompt, tests, f'<input id="{fid}" type="{kind}">')
        page, label = rng.choice((("/about", "About"), ("/contact", "Contact"), ("/help", "Help"), ("/news", "News")))
        prompt = f"Write the HTML for a link to '{page}' whose text is '{label}'."
        tests = [_test("link", f"a = dom.find('a')\nassert a and a.get('href') == {page!r} and a.text() == {label!r}")]
        return _html(prompt, tests, f'<a href="{page}">{label}</a>')
    if level == 3:
        fid, kind, label = rng.choice(FIELDS)
        prompt = (f"Write the HTML for an input with id '{fid}' and type '{kind}', "
                  f"and a label element for it with the text '{label}'.")
        tests = [_test("input", f"i = dom.find('input', id={fid!r})\nassert i and i.get('type') == {kind!r}"),
                 _test("label", f"l = dom.find('label', **{{'for': {fid!r}}})\nassert l and l.text() == {label!r}")]
        return _html(prompt, tests, f'<label for="{fid}">{label}</label><input id="{fid}" type="{kind}">')
    if rng.random() < 0.5:
        items = rng.sample(WORDS, rng.randint(3, 4))
        lid = rng.choice(("fruits", "todo", "places", "tags"))
        prompt = (f"Write the HTML for an unordered list with id '{lid}' whose items are, in order: "
                  + ", ".join(items) + ".")
        tests = [_test("list", f"u = dom.find('ul', id={lid!r})\nassert u"),
                 _test("items", f"u = dom.find('ul', id={lid!r})\n"
                                f"assert u and [li.text() for li in u.find_all('li')] == {items!r}")]
        ref = f'<ul id="{lid}">' + "".join(f"<li>{w}</li>" for w in items) + "</ul>"
        return _html(prompt, tests, ref)
    fields = rng.sample(FIELDS, 2)
    form_id, button = rng.choice(("signup", "contact", "profile")), rng.choice(LABELS)
    prompt = (f"Write the HTML for a form with id '{form_id}' containing "
              + " and ".join(f"an input with id '{f}' and type '{k}' labelled '{lab}'" for f, k, lab in fields)
              + f" (each with a label element), and a button with the text '{button}'.")
    tests = [_test("form", f"assert dom.find('form', id={form_id!r})")]
    for f, k, lab in fields:
        tests.append(_test(f"input-{f}", f"i = dom.find('input', id={f!r})\nassert i and i.get('type') == {k!r}"))
        tests.append(_test(f"label-{f}", f"l = dom.find('label', **{{'for': {f!r}}})\n"
                                        f"assert l and l.text() == {lab!r}"))
    tests.append(_test("button", f"b = dom.find('button')\nassert b and b.text() == {button!r}"))
    ref = (f'<form id="{form_id}">' + "".join(f'<label for="{f}">{lab}</label><input id="{f}" type="{k}">'
                                             for f, k, lab in fields) + f"<button>{button}</button></form>")
    return _html(prompt, tests, ref)


def _html(prompt: str, tests: list[dict[str, str]], reference: str) -> dict[str, Any]:
    return {"family": "L3", "prompt": prompt, "output_kind": "html", "tests": tests, "reference": reference}
