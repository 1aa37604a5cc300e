"""The trainable policy of the local backend: a causal LM with a LoRA adapter.

Log-probabilities of chosen tokens are computed without a full-vocabulary float32
log-softmax over the whole sequence: the LM head runs only on the positions that
predict response tokens, and ``logsumexp`` is taken in float32 chunks.
The leading tokens that every row of a micro-batch shares (the system prompt with the tool
schemas, and the question for the rows of one GRPO group) go through the decoder once: the rows
are packed into one sequence, [shared prefix][suffix 1][suffix 2]…, with a block attention mask
(each suffix sees the prefix and itself) and each row's own position ids, which is the same
computation as one padded row per sequence (:func:`packed_layout`).
The reference policy is the same model with the adapter disabled.

Roles on one frozen base (VG-HRL of HiRS-Agent: manager and specialist; Earth-Agent-Pro: planner and executor):
a policy built with several adapter names holds one named peft adapter per name, all starting from the same
weights, and :meth:`Policy.token_logprobs` scores a batch under the adapter it names. One name is peft's single
``default`` adapter, exactly the policy of a run without roles.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import torch

from earthrl.models.dtype import resolve_dtype
from earthrl.models.lora import SHARED_ADAPTER, attach_lora, lora_config


def pad_right(seqs: list[list], value) -> torch.Tensor:
    """Right-pad lists into a (B, T_max) tensor (long for int ``value``, float32 for float)."""
    width = max(len(s) for s in seqs)
    dtype = torch.float32 if isinstance(value, float) else torch.long
    out = torch.full((len(seqs), width), value, dtype=dtype)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor(s, dtype=dtype)
    return out


def pack_batch(token_ids: list[list[int]], response_masks: list[list[int]]) -> dict[str, torch.Tensor]:
    """Right-pad sequences into tensors.

    Returns:
        ``input_ids`` (B, T) long, ``attention_mask`` (B, T) long (1 on every real token,
        observations included), ``response_mask`` (B, T) long (1 on generated tokens only;
        padding 0).

    Raises:
        ValueError: if a mask's length differs from its ids.
    """
    for i, (ids, m) in enumerate(zip(token_ids, response_masks)):
        if len(ids) != len(m):
            raise ValueError(f"sequence {i}: {len(ids)} ids but {len(m)} mask entries")
    return {
        "input_ids": pad_right(token_ids, 0),
        "attention_mask": pad_right([[1] * len(s) for s in token_ids], 0),
        "response_mask": pad_right(response_masks, 0),
    }


def shared_prefix_len(input_ids: torch.Tensor, attention_mask: torch.Tensor, response_mask: torch.Tensor) -> int:
    """Leading positions that every row of a right-padded batch has in common, before any response
    token and leaving each row at least one token of its own (0 for a single row).

    Args:
        input_ids, attention_mask, response_mask: (B, T) as from :func:`pack_batch`.
    """
    if input_ids.shape[0] < 2:
        return 0
    lengths = attention_mask.sum(dim=1)
    limit = int(lengths.min()) - 1
    first_response = response_mask.float().argmax(dim=1)  # 0 for a row without response tokens (no limit)
    has_response = response_mask.any(dim=1)
    if bool(has_response.any()):
        limit = min(limit, int(first_response[has_response].min()))
    same = (input_ids[:, :max(limit, 0)] == input_ids[:1, :max(limit, 0)]).all(dim=0)
    return int(same.long().cumprod(0).sum()) if limit > 0 else 0


def packed_layout(lengths: list[int], prefix: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Layout of B rows that share their first ``prefix`` tokens, packed into one sequence
    [prefix][row 0's suffix][row 1's suffix]….

    Args:
        lengths: real tokens of each row (prefix included); each is > ``prefix``.
        prefix: shared leading tokens.

    Returns:
        ``index`` (B, T_max) long: the packed position of row b's token t (0 past the row's end);
        ``position_ids`` (L,) long: each packed token's position in its own row;
        ``allowed`` (L, L) bool: query i may attend key j (causal within the row, prefix included).
    """
    index = torch.zeros((len(lengths), max(lengths)), dtype=torch.long)
    positions, segment = [torch.arange(prefix)], [torch.zeros(prefix, dtype=torch.long)]
    start = prefix
    for b, n in enumerate(lengths):
        index[b, :prefix] = torch.arange(prefix)
        index[b, prefix:n] = torch.arange(start, start + n - prefix)
        positions.append(torch.arange(prefix, n))
        segment.append(torch.full((n - prefix,), b + 1, dtype=torch.long))
        start += n - prefix
    seg = torch.cat(segment)
    causal = torch.ones(start, start, dtype=torch.bool).tril()
    allowed = causal & ((seg[None, :] == 0) | (seg[None, :] == seg[:, None]))
    return index, torch.cat(positions), allowed


class Policy:
    """LoRA policy for the local learner.

    Args:
        model_path: base Hugging Face folder.
        lora: ``{"rank", "alpha", "dropout", "target_modules"}`` (see :func:`earthrl.models.lora.lora_config`).
        dtype: "auto", "bfloat16", "float16" or "float32" (:func:`earthrl.models.dtype.resolve_dtype`; ``auto``
            follows ``device``).
        gradient_checkpointing: trade compute for memory in the backward pass.
        logit_chunk: rows of the LM head per float32 logsumexp chunk.
        min_shared_prefix: rows of a batch that share at least this many leading tokens go through
            the decoder packed, the prefix once (:func:`packed_layout`); 0 disables.
        device: "cpu" or "cuda" (resolved by the launcher, :func:`earthrl.models.device.resolve_device`): where
            the weights live and the forward runs. Inputs may be on any device: log-probabilities come back on
            the inputs' device (B × T floats), so the losses run unchanged beside a CUDA model.
        adapters: the run's adapter names (:func:`earthrl.models.lora.adapter_names` of ``agent.adapters``). One
            name: peft's ``default`` adapter (what a run without roles trains, saves and exports). Several: one
            peft adapter of that name each, all equal to the first's initialisation (each role starts from the
            same point; a warm start loads its adapter into each, :func:`earthrl.models.checkpoint.load_adapter_weights`).

    Attributes:
        adapter_names: ``adapters`` as a tuple.

    Raises:
        FileNotFoundError: if ``model_path`` does not exist.
        ValueError: no adapter name, or one given twice.
    """

    def __init__(self, model_path: str, lora: dict, dtype: str = "auto",
                 gradient_checkpointing: bool = True, logit_chunk: int = 256, min_shared_prefix: int = 32,
                 device: str = "cpu", adapters: Sequence[str] = (SHARED_ADAPTER,)) -> None:
        from transformers import AutoModelForCausalLM

        if not Path(model_path).exists():
            raise FileNotFoundError(f"model folder {model_path} does not exist: run `earthrl fetch model NAME`")
        names = tuple(str(n) for n in adapters)
        if not names or len(set(names)) != len(names):
            raise ValueError(f"adapters={list(names)}: give one or more distinct adapter names")
        self.adapter_names = names
        self._peft_names = {names[0]: "default"} if len(names) == 1 else {n: n for n in names}
        self.dtype = resolve_dtype(dtype, cuda=str(device).startswith("cuda"))[0]
        base = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, self.dtype)).to(device)
        if gradient_checkpointing:
            base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            base.enable_input_require_grads()
        self.model = attach_lora(base, lora_config(**lora), self._peft_names[names[0]])
        if len(names) > 1:
            from peft import get_peft_model_state_dict, set_peft_model_state_dict

            first = get_peft_model_state_dict(self.model, adapter_name=names[0])
            for name in names[1:]:
                attach_lora(self.model, lora_config(**lora), name)
                set_peft_model_state_dict(self.model, first, adapter_name=name)
            self.model.set_adapter(names[0])
            self._trainable = {n: [(k, p) for k, p in self.model.named_parameters()
                                   if re.search(rf"\.lora_[A-Za-z_]+\.{re.escape(n)}\.", k)] for n in names}
        else:
            self._trainable = {names[0]: [(k, p) for k, p in self.model.named_parameters() if p.requires_grad]}
        self._active = names[0]
        self.model.config.use_cache = False
        self.logit_chunk = logit_chunk
        self.min_shared_prefix = min_shared_prefix

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """The LoRA parameters of every adapter (everything else is frozen), in the model's order; the optimizer
        is built over all of them (peft's ``set_adapter`` turns ``requires_grad`` off for the inactive ones)."""
        if len(self.adapter_names) == 1:
            return [p for _, p in self._trainable[self.adapter_names[0]]]
        ids = {id(p) for group in self._trainable.values() for _, p in group}
        return [p for p in self.model.parameters() if id(p) in ids]

    def adapter_parameters(self, adapter: str | None = None) -> list[torch.nn.Parameter]:
        """The LoRA parameters of ``adapter`` (None: the first one).

        Raises:
            KeyError: an adapter the policy does not have (names them).
        """
        return [p for _, p in self._trainable[self._name(adapter)]]

    def _name(self, adapter: str | None) -> str:
        if adapter is None or adapter == "":
            return self.adapter_names[0]
        if adapter not in self._peft_names:
            raise KeyError(f"adapter {adapter!r}: the policy has adapters {list(self.adapter_names)} (agent.adapters)")
        return adapter

    def adapter_state_dict(self, adapter: str | None = None) -> dict[str, torch.Tensor]:
        """LoRA weights of ``adapter`` (None: the first one) with peft's keys (the adapter name left out:
        ``…<module>.lora_A.weight`` (r, in), ``…lora_B.weight`` (out, r)), detached on CPU (what the engine loads).

        Raises:
            KeyError: an adapter the policy does not have.
        """
        from peft import get_peft_model_state_dict

        state = get_peft_model_state_dict(self.model, adapter_name=self._peft_names[self._name(adapter)])
        return {k: v.detach().cpu().clone() for k, v in state.items()}

    def activate(self, adapter: str | None) -> None:
        """Make ``adapter`` (None: keep the active one) the one the model runs with. It stays active afterwards,
        so that the backward pass of a gradient-checkpointed forward recomputes under the same adapter.

        Raises:
            KeyError: an adapter the policy does not have.
        """
        if adapter is None:
            return
        name = self._name(adapter)
        if name != self._active:
            self.model.set_adapter(self._peft_names[name])
            self._active = name

    def token_logprobs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                       response_mask: torch.Tensor, temperature: float = 1.0,
                       adapter: str | None = None) -> torch.Tensor:
        """log π(x_t | x_<t) at every response position.

        Args:
            input_ids, attention_mask, response_mask: (B, T) as from :func:`pack_batch`.
            temperature: the rollout temperature (logits are divided by it, as in sampling).
            adapter: the adapter the rows are scored under (:meth:`activate`; it stays active, and only its
                parameters get gradients); None: the active one.

        Raises:
            KeyError: an adapter the policy does not have.

        Returns:
            (B, T) float32 on ``input_ids``' device; entry [b, t] is the log-probability of ``input_ids[b, t]``
            where ``response_mask[b, t] == 1`` and 0 elsewhere (position 0 is never a response token). The
            gradient flows back through the copy from the model's device.
        """
        self.activate(adapter)
        caller = input_ids.device
        here = self.model.get_input_embeddings().weight.device  # the model's device (DeepSpeed may have moved it)
        input_ids, attention_mask, response_mask = (t.to(here) for t in (input_ids, attention_mask, response_mask))
        base = self.model.get_base_model()
        target = response_mask[:, 1:].bool()  # tokens 1..T-1 predicted from positions 0..T-2
        labels = input_ids[:, 1:][target]  # (K,)
        rows = self._hidden_rows(base.get_decoder(), input_ids, attention_mask, response_mask, target)  # (K, H)
        head = base.get_output_embeddings()
        pieces = []
        for s in range(0, rows.shape[0], self.logit_chunk):
            logits = head(rows[s:s + self.logit_chunk]).float()
            if temperature > 0 and temperature != 1.0:
                logits = logits / temperature
            chosen = logits.gather(-1, labels[s:s + self.logit_chunk, None]).squeeze(-1)
            pieces.append(chosen - torch.logsumexp(logits, dim=-1))
        out = torch.zeros(input_ids.shape, dtype=torch.float32, device=input_ids.device)
        if pieces:
            full = torch.zeros(target.shape, dtype=torch.float32, device=input_ids.device)
            full = full.masked_scatter(target, torch.cat(pieces))
            out = torch.cat([torch.zeros_like(out[:, :1]), full], dim=1)
        return out.to(caller)

    def _hidden_rows(self, decoder, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                     response_mask: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Last hidden states at the positions that predict the ``target`` tokens, (K, H)."""
        prefix = shared_prefix_len(input_ids, attention_mask, response_mask)
        if self.min_shared_prefix <= 0 or prefix < self.min_shared_prefix:
            hidden = decoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            return hidden[:, :-1][target]
        lengths = attention_mask.sum(dim=1).tolist()
        index, positions, allowed = packed_layout(lengths, prefix)
        index = index.to(input_ids.device)
        packed = torch.zeros(int(positions.numel()), dtype=input_ids.dtype, device=input_ids.device)
        real = attention_mask.bool()
        packed[index[real]] = input_ids[real]
        dtype = self.model.get_input_embeddings().weight.dtype
        mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill_(~allowed, torch.finfo(dtype).min)
        hidden = decoder(input_ids=packed[None], attention_mask=mask[None, None].to(input_ids.device),
                         position_ids=positions[None].to(input_ids.device)).last_hidden_state[0]
        return hidden[index[:, :-1][target]]

    def adapter_is_identity(self) -> bool:
        """True when every adapter adds exactly nothing: every trainable tensor is a LoRA A or B matrix
        and every B is all zeros (peft's initialisation), so the policy's log-probabilities equal the
        reference's (adapter disabled) bit for bit."""
        for name, p in (item for group in self._trainable.values() for item in group):
            if "lora_B" in name:
                if bool(p.any()):
                    return False
            elif "lora_A" not in name:
                return False
        return True

    @torch.no_grad()
    def ref_logprobs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                     response_mask: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
        """Same as :meth:`token_logprobs` under the reference policy (every adapter disabled: the frozen base)."""
        with self.model.disable_adapter():
            return self.token_logprobs(input_ids, attention_mask, response_mask, temperature)
