"""A tiny BERT with a WordPiece tokenizer that spells any lowercase text (letters, digits, punctuation: no
[UNK]), for the embedding tests; nothing is downloaded."""

from __future__ import annotations

import string
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import BertModel, BertTokenizerFast

from tests.fixtures import tiny_config

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ["the", "is", "pass", "key", "what", "for", "grass", "green", "sky", "blue", "sun", "yellow"]
CHARACTERS = list(string.ascii_lowercase + string.digits)
VOCAB = [*SPECIAL, *WORDS, *CHARACTERS, *(f"##{character}" for character in CHARACTERS), *".,'?!-:;()\"@"]


def tiny_tokenizer() -> BertTokenizerFast:
    return BertTokenizerFast(vocab={token: index for index, token in enumerate(VOCAB)}, do_lower_case=True)


def write_tiny_encoder(folder: Path, positions: int = 32, seed: int = 0) -> Path:
    """A random 2-layer BERT (hidden 32, 4 heads, `positions` table rows) and its tokenizer, saved."""
    torch.manual_seed(seed)
    config = tiny_config(
        "bert", vocab_size=len(VOCAB), num_hidden_layers=2, intermediate_size=64, max_position_embeddings=positions
    )
    folder.mkdir(parents=True, exist_ok=True)
    BertModel(config).save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return folder


def direct_embedding(model, input_ids: list[int]) -> torch.Tensor:
    """Mean of the final hidden states over every token, normalised: what a mean-pooling, normalising
    sentence-transformers pipeline computes."""
    with torch.no_grad():
        states = model(input_ids=torch.tensor([input_ids])).last_hidden_state[0]
    return F.normalize(states.mean(0), dim=-1)


def record_loaded_systems(monkeypatch) -> list[str]:
    """The specs of the systems a run loads (`systems.Embedder`), in order, from now on."""
    from tisa_hf.embeddings import systems

    specs = []
    real = systems.Embedder.__init__

    def recording(self, spec, *args, **kwargs):
        specs.append(spec.spec)
        real(self, spec, *args, **kwargs)

    monkeypatch.setattr(systems.Embedder, "__init__", recording)
    return specs


def parse_systems_then_options(parser, defaults: list[str], systems_and_options: tuple[str, ...]):
    """`parser`'s arguments: the systems first (an option taking a list, such as `--lengths`, would take the
    systems after it as its values), then `defaults`, then the given options, which win."""
    first = next((i for i, item in enumerate(systems_and_options) if item.startswith("--")), len(systems_and_options))
    return parser.parse_args([*systems_and_options[:first], *defaults, *systems_and_options[first:]])


def stop_after_the_first_part(monkeypatch) -> None:
    """From now on, a corpus run in parts (`tisa-hf encode`, `tisa-hf index`) stops with KeyboardInterrupt as soon
    as its first part is saved and counted; `monkeypatch.undo()` or a new setattr restores it."""
    from tisa_hf.embeddings import encode

    add_part = encode.PartState.add_part

    def stopped(self, *args):
        add_part(self, *args)
        raise KeyboardInterrupt

    monkeypatch.setattr(encode.PartState, "add_part", stopped)
