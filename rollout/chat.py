"""Chat-template token deltas for token-in/token-out multi-turn rollouts.

Re-rendering the whole chat and re-tokenising it each turn can change earlier ids
(``["he", "llo"]`` → ``"hello"`` → ``["hello"]``) and corrupt the logprob ratio.
Instead the next prompt is ``previous ids + response ids + observation ids``, where the
observation ids are the template's own delta for one more message: whatever the
template puts after the assistant's end-of-turn token (Qwen/ChatML: ``"\n"``), the
rendered observation message, and the next generation prompt.
"""

from __future__ import annotations

from dataclasses import dataclass

_PROBE = "\u2063PROBE\u2063"


@dataclass
class ChatCodec:
    """Builds prompt and observation token ids from a Hugging Face tokenizer's chat template.

    Args:
        tokenizer: a ``transformers`` tokenizer with a ``chat_template``.
        observation_role: role of environment messages ("tool" renders as Qwen's
            ``<tool_response>`` block inside a user turn).

    Raises:
        ValueError: if the tokenizer has no chat template or no end-of-turn token.
    """

    tokenizer: object
    observation_role: str = "tool"

    def __post_init__(self) -> None:
        tok = self.tokenizer
        if not getattr(tok, "chat_template", None):
            raise ValueError("the tokenizer has no chat_template: use an instruct model's tokenizer")
        base = [{"role": "user", "content": "q"}, {"role": "assistant", "content": _PROBE}]
        prefix = self._render(base, add_generation_prompt=False)
        after_probe = prefix[prefix.rindex(_PROBE) + len(_PROBE):]
        # The end-of-turn token is what the template writes right after assistant content
        # (Qwen: <|im_end|>, although its tokenizer's eos_token may be <|endoftext|>).
        first = self._encode(after_probe)[:1]
        if not first or first[0] not in set(tok.all_special_ids) | set(getattr(tok, "added_tokens_decoder", {})):
            raise ValueError("the chat template does not close assistant turns with a special end-of-turn token")
        self.eos_id: int = first[0]
        self.eos_token: str = tok.convert_ids_to_tokens(self.eos_id)
        full = self._render(base + [{"role": self.observation_role, "content": _PROBE}], add_generation_prompt=True)
        if not full.startswith(prefix):
            raise ValueError("the chat template re-renders earlier turns when a message is added; token deltas are impossible")
        self._obs_head, self._obs_tail = full[len(prefix):].split(_PROBE)
        user = self._render(base + [{"role": "user", "content": _PROBE}], add_generation_prompt=True)
        self._user_head, self._user_tail = user[len(prefix):].split(_PROBE)
        self._after_eos = after_probe[len(self.eos_token):]

    def _render(self, messages: list[dict], add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)

    def prompt_ids(self, system: str, user: str) -> list[int]:
        """Token ids of [system, user] plus the assistant generation prompt."""
        msgs = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        return self._encode(self._render(msgs, add_generation_prompt=True))

    def observation_ids(self, observation: str, response_ids: list[int], role: str | None = None) -> list[int]:
        """Ids to append after a response so that the next turn sees ``observation`` (as a message of
        ``observation_role``, or of ``role="user"``: a user's reply, e.g. to a clarification question).

        If the response was cut before its end-of-turn token (finish_reason "length"), the
        end-of-turn token is supplied here, on the observation side (loss mask 0).
        """
        if role not in (None, self.observation_role, "user"):
            raise ValueError(f"role={role!r}: use None ({self.observation_role}) or 'user'")
        head, tail = (self._user_head, self._user_tail) if role == "user" else (self._obs_head, self._obs_tail)
        text = self._after_eos + head + observation + tail
        if not response_ids or response_ids[-1] != self.eos_id:
            text = self.eos_token + text
        return self._encode(text)

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
