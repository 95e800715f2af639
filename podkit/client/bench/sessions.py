"""The multi-turn session workload's pure parts: conversations that grow as an agent's do, and their figures.

A session is one conversation: a long system prompt unique to the session (its
first tokens name the run and the session, so no two sessions share a prefix),
then one new user message per turn. Turn k sends turn k-1's messages, the
answer to them and the new user message, so every turn's prompt starts with
the whole of the one before: what vLLM's prefix cache serves when the turn
reaches the replica that answered the last one.

Texts are words that most tokenizers keep whole (:data:`.prompts.WORDS`), one
token each give or take; one ``/tokenize`` of a sample, where the server answers
it (a router may not forward it), measures the tokens per word, and the word
counts follow. Each answer's ``usage.prompt_tokens`` says what the server counted.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from openai.types.chat import ChatCompletionMessageParam

from podkit.client.bench.prompts import WORDS
from podkit.client.bench.stats import Timing, summary

SESSION_HEADER = "X-Session-ID"  # what vllm-router's consistent_hash policy reads
TEMPLATE_TOKENS_PER_MESSAGE = 8  # a chat template's markers around one message, about


def words_text(head: str, tokens: int, seed: int) -> str:
    """``head`` then about ``tokens`` words drawn from ``WORDS`` with a generator seeded by ``seed``."""
    rng = random.Random(seed)
    return head + "".join(" " + rng.choice(WORDS) for _ in range(max(0, tokens)))


@dataclass
class Conversation:
    """One session: its id (the session header's value), its system prompt, one user message per
    turn, and the answers received so far (``answers[k]`` answers turn ``k``)."""

    session_id: str
    system: str
    users: list[str]
    answers: list[str] = field(default_factory=list)

    @property
    def turns(self) -> int:
        return len(self.users)

    def messages(self, turn: int) -> list[ChatCompletionMessageParam]:
        """The messages turn ``turn`` (from 0) sends: the system prompt, every earlier user message
        with its answer, then this turn's user message. Needs the answers to the earlier turns."""
        if turn >= self.turns:
            raise IndexError(f"session {self.session_id} has {self.turns} turns, not {turn + 1}")
        if len(self.answers) < turn:
            raise ValueError(f"turn {turn + 1} of session {self.session_id} needs the answer to turn {turn}")
        messages: list[ChatCompletionMessageParam] = [{"role": "system", "content": self.system}]
        for k in range(turn):
            messages += [{"role": "user", "content": self.users[k]}, {"role": "assistant", "content": self.answers[k]}]
        messages.append({"role": "user", "content": self.users[turn]})
        return messages


def words_for(tokens: int, tokens_per_word: float) -> int:
    """How many words make about ``tokens`` tokens (at least one)."""
    return max(1, round(tokens / tokens_per_word))


def build_conversations(
    sessions: int, turns: int, first_tokens: int, turn_tokens: int, nonce: str, tokens_per_word: float = 1.0
) -> list[Conversation]:
    """``sessions`` conversations of ``turns`` turns: a system prompt of about ``first_tokens``
    tokens headed ``"<nonce> session <n>:"`` (unique from its first tokens), and user messages of
    about ``turn_tokens`` tokens, each headed with its session and turn; ``tokens_per_word`` is
    what the server's tokenizer makes of a word."""
    first_words, turn_words = words_for(first_tokens, tokens_per_word), words_for(turn_tokens, tokens_per_word)
    conversations = []
    for number in range(1, sessions + 1):
        session_id = f"{nonce}-{number}"
        system = words_text(f"{nonce} session {number}:", first_words, seed=number * 1000)
        users = [
            words_text(f"Session {number} turn {turn}:", turn_words, seed=number * 1000 + turn)
            for turn in range(1, turns + 1)
        ]
        conversations.append(Conversation(session_id, system, users))
    return conversations


def sample_text(words: int = 200) -> str:
    """Words as the sessions use them, to measure the server's tokens per word."""
    return words_text("", words, seed=0).strip()


def last_prompt_tokens(first_tokens: int, turns: int, turn_tokens: int, output_tokens: int) -> int:
    """About how long the last turn's prompt is: the system prompt, every user message, every
    earlier answer, and the template's markers around each message."""
    messages = 1 + turns + (turns - 1)
    return first_tokens + turns * turn_tokens + (turns - 1) * output_tokens + messages * TEMPLATE_TOKENS_PER_MESSAGE


def aggregate_sessions(sessions: Sequence[Sequence[Timing]], turns: int, wall_s: float) -> dict[str, Any]:
    """The workload's figures from each session's turn timings (a session that failed stops at the
    failed turn): TTFT and the prompt length the server counted, per turn, and the total time."""
    sent = [t for timings in sessions for t in timings]
    done = [t for t in sent if t.error is None and t.chunks]
    per_turn = []
    for turn in range(turns):
        timings = [s[turn] for s in sessions if len(s) > turn]
        ok = [t for t in timings if t.error is None and t.chunks]
        counted = [t.prompt_tokens for t in ok if t.prompt_tokens is not None]
        per_turn.append(
            {
                "turn": turn + 1,
                "requests": len(timings),
                "completed": len(ok),
                "errors": sorted({t.error for t in timings if t.error}),
                "prompt_tokens": {"min": min(counted), "max": max(counted)} if counted else None,
                "ttft_s": summary([t.ttft for t in ok if t.ttft is not None]),
            }
        )
    output_tokens = sum(t.output_tokens if t.output_tokens is not None else len(t.chunks) for t in done)
    return {
        "sessions": len(sessions),
        "turns": turns,
        "requests": len(sent),
        "completed": len(done),
        "not_sent": len(sessions) * turns - len(sent),  # the turns after a failed one
        "errors": sorted({t.error for t in sent if t.error}),
        "wall_s": round(wall_s, 3),
        "output_tokens": output_tokens,
        "ttft_s": summary([t.ttft for t in done if t.ttft is not None]),
        "per_turn": per_turn,
    }
