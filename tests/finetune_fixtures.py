"""Tiny models and a generated GLUE-format task for the fine-tuning tests (nothing is downloaded)."""

from __future__ import annotations

import random
from pathlib import Path

from transformers import AlbertConfig, AlbertForMaskedLM, BertConfig, BertModel, BertTokenizerFast

WORDS = [f"w{index}" for index in range(40)]


def write_tiny_model(folder: Path, architecture: str = "bert", dropout: float = 0.0) -> Path:
    """A random 2-layer encoder (hidden 32) and a word-level tokenizer, saved with save_pretrained."""
    folder.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tokenizer = BertTokenizerFast(vocab_file=str(folder / "vocab.txt"), do_lower_case=True)
    common = dict(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
    )
    if architecture == "albert":
        model = AlbertForMaskedLM(AlbertConfig(embedding_size=16, classifier_dropout_prob=dropout, **common)).albert
    else:
        model = BertModel(BertConfig(**common))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def rte_rows(count: int, seed: int) -> list[tuple[str, str, str]]:
    """(sentence1, sentence2, label): entailment when sentence2 repeats sentence1's first word."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        first = rng.sample(WORDS, 6)
        entailed = rng.random() < 0.5
        second = [first[0] if entailed else rng.choice(WORDS[20:])] + rng.sample(WORDS, 3)
        rows.append((" ".join(first), " ".join(second), "entailment" if entailed else "not_entailment"))
    return rows


def write_rte_tsv(folder: Path, train_rows: int = 64, dev_rows: int = 24) -> Path:
    """An RTE folder in the original GLUE format (header index/sentence1/sentence2/label)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, count, seed in (("train.tsv", train_rows, 0), ("dev.tsv", dev_rows, 1)):
        lines = ["index\tsentence1\tsentence2\tlabel"]
        lines += [f"{index}\t{a}\t{b}\t{label}" for index, (a, b, label) in enumerate(rte_rows(count, seed))]
        (folder / name).write_text("\n".join(lines) + "\n")
    return folder
