"""A scripted rollout engine for agent loops with several roles (HiRS-Agent, Earth-Agent-Pro)."""


class RoleEngine:
    """Plays each role's scripted texts in order, the role of a prompt named by ``role_of(prompt text)``; records
    every prompt it saw as ``(role, text, ids)`` in :attr:`seen`.

    Args:
        tok: the tokenizer (encodes the scripts, decodes the prompts); codec: its ChatCodec (end-of-turn id).
        scripts: role -> its turns' texts, in order.
        role_of: prompt text -> the role that answers it.
    """

    def __init__(self, tok, codec, scripts, role_of):
        self.tok, self.codec, self.role_of = tok, codec, role_of
        self.scripts = {role: list(texts) for role, texts in scripts.items()}
        self.seen: list[tuple[str, str, list[int]]] = []

    def generate(self, prompts, params):
        outs = []
        for p in prompts:
            text = self.tok.decode(p)
            role = self.role_of(text)
            self.seen.append((role, text, list(p)))
            ids = self.tok(self.scripts[role].pop(0), add_special_tokens=False)["input_ids"] + [self.codec.eos_id]
            outs.append({"response_ids": ids, "logprobs": [-0.5] * len(ids), "finish_reason": "stop"})
        return outs

    def prompts(self, role):
        """The texts of the prompts ``role`` answered, in order."""
        return [text for r, text, _ in self.seen if r == role]
