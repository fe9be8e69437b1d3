"""The in-sequence contrastive loss of `tisa-hf context-train` (InSeNT-style: ConTEB, arXiv 2505.24782), a
sentence-transformers loss (`forward(features, labels)`) that its `SentenceTransformerTrainer` calls.

Each document is read whole once; each of its windows is the mean of that read's token states over the window,
normalised (late chunking: `common.long_inputs.window_means`, the vector the retrieval read-outs measure for a
whole-read system). Each query (the model's own sentence embedding) must find its window, by the scaled cosine and
cross-entropy, among the other windows of its document (in-sequence negatives, which differ from it only in what
they hold, not in what surrounds them) and, with `in_batch`, every window of the batch's other documents.

Written here because sentence-transformers' ranking losses embed each text column into one vector of its own,
while these candidates are several vectors pooled from one forward pass over a document, at places its label gives.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F
from sentence_transformers import SentenceTransformer
from torch import nn

from ..common.long_inputs import window_means

LOSS_NAME = "in_sequence"


class InSequenceLoss(nn.Module):
    """Features: the queries, then the documents; labels: per row [first windowed token, window number]."""

    def __init__(self, model: SentenceTransformer, window_tokens: int, scale: float = 20.0, in_batch: bool = True):
        super().__init__()
        self.model = model
        self.step = window_tokens - 2
        self.scale = scale
        self.in_batch = in_batch

    def forward(
        self, sentence_features: Iterable[dict[str, torch.Tensor]], labels: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """The loss by its name, which the trainer logs apart from a mixed-in loss's."""
        query_features, document_features = sentence_features
        queries = F.normalize(self.model(query_features)["sentence_embedding"], dim=-1)
        states = self.model(document_features)["token_embeddings"]
        lengths = document_features["attention_mask"].sum(-1).tolist()
        windows, owners = [], []
        for row, (first, length) in enumerate(zip(labels[:, 0].tolist(), lengths, strict=True)):
            windows.append(window_means(states[row, first : length - 1], self.step))
            owners += [row] * len(windows[-1])
        candidates = torch.cat(windows)
        starts = torch.tensor([0, *[len(w) for w in windows[:-1]]], device=labels.device).cumsum(0)
        targets = starts + labels[:, 1]
        scores = self.scale * queries @ candidates.T
        if not self.in_batch:
            owner = torch.tensor(owners, device=scores.device)
            scores = scores.masked_fill(
                owner[None, :] != torch.arange(len(queries), device=scores.device)[:, None], -torch.inf
            )
        return {LOSS_NAME: F.cross_entropy(scores, targets)}

    @property
    def citation(self) -> str:
        return (
            "@misc{conti2025context, title={Context is Gold to find the Gold Passage: Evaluating and Training "
            "Contextual Document Embeddings}, author={Max Conti and others}, year={2025}, eprint={2505.24782}}"
        )

    def get_config_dict(self) -> dict[str, float | int | bool]:
        """What sentence-transformers' model card records of the loss."""
        return {"window_tokens": self.step + 2, "scale": self.scale, "in_batch": self.in_batch}
