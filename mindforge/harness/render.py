"""Chat messages to token ids with the model's own chat template.

Why per message: a view is the concatenation of independently rendered
message pieces, so the ids of a message never depend on what follows it, and
a prefix of a conversation renders to a prefix of its ids. That is what makes
an adapter's re-entered view byte-identical (the engine's prefix cache hits)
and lets training take the ids the engine saw as they are.

How: the template is asked for the text of one message after a fixed anchor
message (the difference of two renders), which is tokenized on its own. For
templates such as ChatML every piece starts at a special token, so the
concatenation equals tokenizing the whole render; ``tests/test_harness_render.py``
checks that token for token against ``tokenizer.apply_chat_template`` over many
conversations. A template whose render of a message depends on its neighbours
other than through "is it the first message" is refused at construction.

Assistant messages the engine wrote are never rendered from text: their ids
are the generation prompt, the engine's completion ids verbatim, then the
template's end of message (without the end token when the engine already
sampled it).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from mindforge.errors import InputError

_ANCHOR = {"role": "system", "content": "anchor"}
_SENTINEL = "\u2063MINDFORGE-SENTINEL\u2063"


class ChatRenderer:
    def __init__(self, tokenizer: Any):
        if not getattr(tokenizer, "chat_template", None):
            raise InputError("tokenizer", "chat_template", "the tokenizer has no chat template; the harness needs one to render messages")
        self.tokenizer = tokenizer
        self.eos_id: int = int(tokenizer.eos_token_id)
        self.eos_text: str = tokenizer.eos_token
        anchor = self._text([_ANCHOR])
        gen = self._text([_ANCHOR], add_generation_prompt=True)
        if not gen.startswith(anchor):
            raise InputError("chat template", "", "the chat template's generation prompt does not extend the conversation")
        self.generation_text = gen[len(anchor):]
        piece = self._piece_text({"role": "assistant", "content": _SENTINEL}, first=False)
        header, _, footer = piece.partition(_SENTINEL)
        if header != self.generation_text:
            raise InputError("chat template", "", f"the chat template opens an assistant message with {header!r} but prompts "
                             f"generation with {self.generation_text!r}; the harness needs them equal")
        self.footer_text = footer
        self.generation_ids: tuple[int, ...] = self.encode(self.generation_text)
        self._piece = lru_cache(maxsize=16384)(self._piece_ids)

    @classmethod
    def from_model(cls, model_path: str | Path) -> ChatRenderer:
        from transformers import AutoTokenizer

        return cls(AutoTokenizer.from_pretrained(str(model_path)))

    # ------------------------------------------------------------------ text level
    def _text(self, messages: Sequence[dict[str, Any]], add_generation_prompt: bool = False) -> str:
        return self.tokenizer.apply_chat_template(list(messages), tokenize=False,
                                                  add_generation_prompt=add_generation_prompt)

    def _piece_text(self, message: dict[str, Any], *, first: bool) -> str:
        if first:
            return self._text([message])
        anchor = self._text([_ANCHOR])
        both = self._text([_ANCHOR, message])
        if not both.startswith(anchor):
            raise InputError("chat template", "", "the chat template renders a message differently depending on what follows; "
                             "per-message rendering is not possible with it")
        return both[len(anchor):]

    def encode(self, text: str) -> tuple[int, ...]:
        return tuple(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    # ------------------------------------------------------------------ id level
    def _piece_ids(self, role: str, content: str, first: bool) -> tuple[int, ...]:
        return self.encode(self._piece_text({"role": role, "content": content}, first=first))

    def message_ids(self, role: str, content: str, *, first: bool = False) -> tuple[int, ...]:
        """The ids of one message; ``first`` for the conversation's first message."""
        if not isinstance(content, str):
            raise InputError("message", "content", f"must be text, got {type(content).__name__}")
        return self._piece(role, content, first)

    def render(self, messages: Sequence[dict[str, Any]]) -> list[int]:
        """A whole conversation (text messages only), no generation prompt."""
        out: list[int] = []
        for i, m in enumerate(messages):
            out += self.message_ids(m["role"], m["content"], first=i == 0)
        return out

    def prompt(self, messages: Sequence[dict[str, Any]], prefill: str = "") -> list[int]:
        """Ids that ask for the next assistant message, optionally with its first words given."""
        return self.render(messages) + list(self.generation_ids) + list(self.encode(prefill) if prefill else ())

    def closing_ids(self, completion_ids: Sequence[int]) -> tuple[int, ...]:
        """What ends an assistant message after the engine's ``completion_ids``."""
        footer = self.footer_text
        if completion_ids and completion_ids[-1] == self.eos_id and footer.startswith(self.eos_text):
            footer = footer[len(self.eos_text):]
        return self.encode(footer) if footer else ()

    def assistant_ids(self, completion_ids: Sequence[int]) -> tuple[int, ...]:
        """An engine-written assistant message as it sits in a later view."""
        return self.generation_ids + tuple(completion_ids) + self.closing_ids(completion_ids)
