"""Generated tasks a small model solves some of the time: instructions, small functions, UI fragments.

Each generator builds the task and its reference from the same drawn
constants, so the reference is right by construction (the sandbox still
checks it), and each takes a ``level`` (1 to ``LEVELS``), the dial Discovery's
staircase turns. Levels are small steps, because a small model's solve rate
jumps from all to nothing between neighbouring kinds (SmolLM2-135M: every
``add_k`` solved, every ``first_k`` failed, ``count_c`` about half):

- instruction: a word-count range; plus one more constraint; three
  constraints; three constraints or an exact one-word answer;
- function: one arithmetic step; a count or a divisibility test; a slice or a
  clamp; a filtered sum or a word filter;
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
FUNCTION_KINDS = {1: ("add", "times", "repeat"), 2: ("count_char", "multiple"), 3: ("first_n", "last_n", "clamp"),
                  4: ("sum_multiples", "long_words")}


def function_task(rng: random.Random, level: int = 2) -> dict[str, Any]:
    """A small function with drawn constants, argument type and edge cases; ``level`` picks how many steps."""
    k = rng.randint(2, 9)
    kind = rng.choice(FUNCTION_KINDS[max(1, min(level, LEVELS))])
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
    elif kind == "sum_multiples":
        ep, sig = f"sum_multiples_of_{k}", "items: list"
        doc, body = f"returns the sum of the numbers in the list that are multiples of {k}", \
            f"return sum(x for x in items if x % {k} == 0)"
        data = [1, k, k + 1, 2 * k, 3 * k + 1, -k]
        cases = [(xs, sum(x for x in xs if x % k == 0)) for xs in ([], data, [k + 1], [0, k * 5])]
    elif kind == "clamp":
        lo, hi = -k, k * 3
        ep, sig = f"clamp_{k}", "x: int"
        doc = f"returns x limited to the range {lo} to {hi} (values below {lo} become {lo}, above {hi} become {hi})"
        body = f"return max({lo}, min({hi}, x))"
        cases = [(x, max(lo, min(hi, x))) for x in (0, lo - 5, hi + 1, hi, k)]
    elif kind == "long_words":
        ep, sig = f"words_longer_than_{k}", "text: str"
        doc = f"returns the list of words in text (split on spaces) that have more than {k} letters, in order"
        body = f"return [w for w in text.split() if len(w) > {k}]"
        texts = ("", " ".join(rng.sample(WORDS, 5)), "a " + "b" * (k + 1), "x" * k)
        cases = [(t, [w for w in t.split() if len(w) > k]) for t in texts]
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
