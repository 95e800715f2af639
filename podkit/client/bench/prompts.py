"""Prompts of an exact token count, and the prompt lengths that fit the server's context.

Each prompt is a unique header (a per-run nonce and the request number, so
vLLM's prefix cache never serves a measured prompt) followed by words;
:func:`build_prompt` grows the word list with ``/tokenize`` until the count is
exact.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass

MAX_TOKENIZE_CALLS = 48

# Words most tokenizers keep whole (one token with its leading space), so a
# prompt converges on its length in a few /tokenize calls.
WORDS = (
    "the of and to in is for that with on as by this from it be are was at or an not "
    "code file test value list return function data model server request error line name type "
    "class import module change patch bug fix call read write open close start stop run build "
    "check state path user key time size count first last next item table field method object "
    "string number result output input option default update create delete load save parse "
    "format print log cache queue thread lock event handler client socket buffer stream token"
).split()
FILLERS = (".", ",", " a", "a", " I", "!", " x", "x", "-", ":")

Tokenize = Callable[[str], int]


def cap_lengths(lengths: Iterable[int], max_model_len: int | None, output_tokens: int) -> tuple[list[int], list[str]]:
    """The prompt lengths that fit under ``max_model_len`` with ``output_tokens`` to spare.

    A length above the limit becomes the limit (once); notes say what changed.
    """
    lengths = list(lengths)
    if max_model_len is None:
        return sorted(set(lengths)), ["max model length unknown: prompt lengths are not capped"]
    limit = max_model_len - output_tokens
    if limit < 1:
        raise ValueError(f"max model length {max_model_len} leaves no room for {output_tokens} output tokens")
    capped = sorted({min(length, limit) for length in lengths})
    over = [length for length in lengths if length > limit]
    notes = []
    if over:
        notes.append(
            f"prompt lengths {', '.join(map(str, sorted(set(over))))} exceed max_model_len {max_model_len} "
            f"minus {output_tokens} output tokens: measured at {limit} instead"
        )
    return capped, notes


@dataclass
class Prompt:
    text: str
    tokens: int  # as /tokenize counts them (== target unless no word or filler fit exactly)
    target: int


def build_prompt(target: int, tokenize: Tokenize, seed: int, nonce: str = "", words_per_token: float = 0.5) -> Prompt:
    """A prompt of exactly ``target`` tokens, as ``tokenize`` counts them.

    The header ``"<nonce> #<seed>:"`` makes every prompt unique from its first
    tokens; words follow, drawn from ``WORDS`` with a generator seeded by
    ``seed``. Steps aim a little short of the missing count (``words_per_token``
    is the first guess, then measured), shrink after an overshoot, and finish
    with single words or fillers. If nothing lands exactly within
    ``MAX_TOKENIZE_CALLS`` the prompt stays just under the target.
    """
    rng = random.Random(seed)
    head = f"{nonce} #{seed}:".strip()
    words: list[str] = []

    def text(ws: list[str]) -> str:
        return head + "".join(" " + w for w in ws)

    count = tokenize(head)
    calls = 1
    if count > target:
        raise ValueError(f"a prompt of {target} tokens is shorter than its own header ({count} tokens)")
    ratio = words_per_token
    suffix = ""
    while count < target and calls < MAX_TOKENIZE_CALLS:
        missing = target - count
        step = max(1, int(missing * ratio * 0.9)) if missing > 4 else 1
        trial = words + [rng.choice(WORDS) for _ in range(step)]
        got = tokenize(text(trial))
        calls += 1
        if got <= target:
            if got > count:
                ratio = (len(trial) - len(words)) / (got - count)
            words, count = trial, got
        elif step > 1:
            ratio *= 0.5
        elif missing == 1 or calls > MAX_TOKENIZE_CALLS // 2:
            break  # one word is too long: finish with a filler below
    for filler in FILLERS:
        if count == target or calls >= MAX_TOKENIZE_CALLS:
            break
        got = tokenize(text(words) + filler)
        calls += 1
        if got == target:
            suffix, count = filler, got
    return Prompt(text(words) + suffix, count, target)
