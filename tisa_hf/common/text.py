"""Plain text for adaptation and long-input evaluation: articles, fixed-length token blocks and fixed masks.

A text file is split into articles at WikiText's title lines (` = Title = `; sections are ` = = Section = = `),
or, plain text without them, into its paragraphs (blocks of lines between blank lines), so that any UTF-8 text
gives documents to pack and to hold out whole. Train/held-out splits are made of whole articles, never of blocks, so no
article contributes to both. Packing concatenates the tokenised articles with a separator token between them
and cuts the stream into blocks `[CLS] t_1 ... t_{L-2} [SEP]` of exactly L tokens (the last partial block is
dropped), so every block is full, no padding is needed and articles longer than L are read across blocks.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import torch
from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerBase

from ..errors import UsageError
from .saved_files import read_text

TITLE_LINE = re.compile(r"^ = (?!= )(.*) = $")
HEADING_MARKERS = re.compile(r"^ (?:= )+(.*?)(?: =)+ $")
# WikiText splits numbers and hyphenated words with @-marked tokens ("1 @,@ 000", "M @-@ 82"); undone here so
# that a subword tokenizer sees ordinary text.
WIKITEXT_MARKERS = {" @-@ ": "-", " @,@ ": ",", " @.@ ": "."}
WIKITEXT_UNKNOWN = "<unk>"


def read_articles(path: str | Path) -> list[str]:
    """The articles of a text file (its paragraphs when it has no title line), each as one string of its
    non-empty lines (headings without their `=`)."""
    lines = read_text(path).splitlines()
    titled = any(TITLE_LINE.match(line) for line in lines)
    articles: list[list[str]] = []
    after_blank = True
    for line in lines:
        if not line.strip():
            after_blank = True
            continue
        if (TITLE_LINE.match(line) if titled else after_blank) or not articles:
            articles.append([])
        after_blank = False
        heading = HEADING_MARKERS.match(line)
        articles[-1].append(heading.group(1) if heading else line.strip())
    if not articles:
        raise UsageError(f"Text file {path} is empty; give a file of plain text (e.g. WikiText's valid.txt).")
    return [" ".join(parts) for parts in articles]


def split_articles(articles: list[str], held_out_fraction: float) -> tuple[list[str], list[str]]:
    """(training, held-out) articles: the last ceil(fraction x count) articles are held out, whole."""
    held_out = math.ceil(held_out_fraction * len(articles)) if held_out_fraction > 0 else 0
    return articles[: len(articles) - held_out], articles[len(articles) - held_out :]


def tokenize_articles(articles: list[str], tokenizer: PreTrainedTokenizerBase) -> list[list[int]]:
    """Token ids of each article, without special tokens; WikiText's markers and `<unk>` are undone first."""
    if not articles:  # the tokenizer fails on an empty batch
        return []
    texts = []
    for article in articles:
        for marker, replacement in WIKITEXT_MARKERS.items():
            article = article.replace(marker, replacement)
        texts.append(article.replace(WIKITEXT_UNKNOWN, tokenizer.unk_token))
    # verbose=False: whole articles are longer than the model's table on purpose; packing cuts them.
    return tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]


def block_count(documents: list[list[int]], length: int) -> int:
    """How many blocks of `length` tokens `pack_blocks` makes from `documents`."""
    stream = sum(len(document) + 1 for document in documents)
    return stream // (length - 2)


def pack_blocks(documents: list[list[int]], length: int, tokenizer: PreTrainedTokenizerBase) -> torch.Tensor:
    """(blocks, length) token ids: the documents joined by [SEP] and cut into `[CLS] ... [SEP]` blocks."""
    if length < 3:
        raise UsageError(f"A block needs at least 3 tokens ([CLS], one token, [SEP]); got length {length}.")
    separator = tokenizer.sep_token_id
    stream = [token for document in documents for token in (*document, separator)]
    body = length - 2
    count = len(stream) // body
    chunks = torch.tensor(stream[: count * body], dtype=torch.long).view(count, body)
    cls = torch.full((count, 1), tokenizer.cls_token_id, dtype=torch.long)
    sep = torch.full((count, 1), separator, dtype=torch.long)
    return torch.cat([cls, chunks, sep], dim=1)


def spread_selection(blocks: torch.Tensor, limit: int | None) -> torch.Tensor:
    """At most `limit` blocks, evenly spaced over the text (so a cap does not keep only its first articles)."""
    if limit is None or len(blocks) <= limit:
        return blocks
    return blocks[np.unique(np.linspace(0, len(blocks) - 1, limit).round().astype(int))]


def special_tokens_mask(input_ids: torch.Tensor, tokenizer: PreTrainedTokenizerBase) -> torch.Tensor:
    """Where `input_ids` holds a special token ([CLS], [SEP], ...), which masking must leave alone."""
    return torch.isin(input_ids, torch.tensor(tokenizer.all_special_ids, device=input_ids.device))


def mask_blocks(
    blocks: torch.Tensor, tokenizer: PreTrainedTokenizerBase, probability: float, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(masked input ids, labels) by transformers' standard MLM masking (80% [MASK], 10% random, 10% kept)
    from a generator seeded with `seed`: the same blocks and seed give the same masks for every model."""
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=probability, seed=seed)
    batch = collator(
        [
            {"input_ids": ids, "special_tokens_mask": special}
            for ids, special in zip(blocks, special_tokens_mask(blocks, tokenizer).long(), strict=True)
        ]
    )
    return batch["input_ids"], batch["labels"]
