"""The systems the embedding commands compare, as given on their command line, and how a model system embeds.

A model system (spelled as `common/spellings.py` reads it: `[READOUT][READING]MODEL` or
`[READOUT]tisa:MODE:S:MODEL`) is a model (a sentence-transformers folder brings its own pooling, otherwise mean
pooling) reading texts in the pieces its reading cuts (`Embedder`); every embedding is normalised, and texts are
compared by cosine. What a retrieval command keeps of a document and how it scores it is the read-out's
(`retrieval/readouts.py`). Queries are read the same way as documents.

Three systems embed nothing (the retrieval commands take them; `lexical.py`, `retrieval/ranking.py`):
`bm25` (`bm25:TOKENIZER`), BM25 over the documents' text, and the fusions of a BM25 system and a model system,
both given as systems of the same run too: `hybrid:BM25+SYSTEM`, reciprocal-rank fusion (k = 60) of their
rankings, and `convex:W:BM25+SYSTEM`, convex fusion of their normalised scores.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from ..common.checkpoints import CheckpointFacts, reads_any_length
from ..common.long_inputs import PositionInterpolation, chunk_average
from ..common.sentence_models import SentenceTransformer, require_sentence_transformers, to_tisa_sentence_transformer
from ..common.spellings import MEAN, Reading, Readout, Spelling, parse_spelling, spoken_list
from ..config import TisaConfig
from ..errors import UsageError
from .kept_states import KeptTokenStates
from .lexical import CONVEX_FORM, HYBRID_FORM, bm25_tokenizer, is_lexical, split_hybrid
from .options import READOUTS_TAKEN


@dataclass(frozen=True)
class SystemSpec:
    """A compared model system: `spec` as given, its spelling (model, reading, read-out, the TISA given here) and
    the model's facts."""

    spec: str
    spelling: Spelling
    facts: CheckpointFacts

    @classmethod
    def parse(cls, spec: str) -> SystemSpec:
        spelling = parse_spelling(spec)
        try:
            facts = CheckpointFacts.read(spelling.model, "model", needs_tokenizer=True)
        except ValueError as error:
            raise UsageError(f"{spec}: {error}") from error
        if (spelling.tisa is not None or spelling.reading.stretches) and facts.tisa is not None:
            raise UsageError(
                f"{spec}: {spelling.model} already has TISA ({facts.tisa}); give the model it was made from."
            )
        return cls(spec, spelling, facts)

    @property
    def reading(self) -> Reading:
        return self.spelling.reading

    @property
    def readout(self) -> Readout:
        return self.spelling.readout

    @property
    def tisa(self) -> TisaConfig | None:
        return self.spelling.tisa

    @property
    def table_length(self) -> int:
        return self.facts.table_length

    @property
    def effective_tisa(self) -> TisaConfig | None:
        return self.tisa or self.facts.tisa

    def reads(self, length: int) -> bool:
        return self.reading.reads_any_length or reads_any_length(self.effective_tisa) or length <= self.table_length

    def check_lengths(self, lengths: Iterable[int]) -> None:
        too_long = [length for length in lengths if not self.reads(length)]
        if too_long:
            has = "TISA mode='add' keeps its position embeddings" if self.effective_tisa else "it has no TISA"
            raise UsageError(
                f"{self.spec} cannot read {too_long[0]} tokens: its {self.facts.positions.describes} holds "
                f"{self.table_length} and {has}. Give lengths up to {self.table_length}, or read longer documents with "
                f"{', '.join(self.spelling.longer_readings())} or a replace-mode model."
            )


@dataclass(frozen=True)
class LexicalSpec:
    """BM25 over the documents' text with a named tokenizer (`lexical.py`); it reads any length."""

    spec: str
    tokenizer: str


@dataclass(frozen=True)
class HybridSpec:
    """A fusion of a BM25 system and a model system, by their spellings: of their rankings (reciprocal-rank fusion,
    `weight` None) or of their scores (convex fusion, the model system's `weight`)."""

    spec: str
    lexical: str
    dense: str
    weight: float | None = None


RetrievalSystem = SystemSpec | LexicalSpec | HybridSpec


def parse_system(spec: str) -> RetrievalSystem:
    """A system of a retrieval command: BM25, a hybrid (its parts checked here), or a model read some way."""
    if is_lexical(spec):
        return LexicalSpec(spec, bm25_tokenizer(spec))
    parts = split_hybrid(spec)
    if parts is not None:
        if not isinstance(parse_system(parts[1]), SystemSpec):
            raise UsageError(f"{spec}: {HYBRID_FORM if parts[2] is None else CONVEX_FORM}.")
        return HybridSpec(spec, *parts)
    return SystemSpec.parse(spec)


def check_hybrid_parts(systems: list[RetrievalSystem]) -> None:
    """Every fusion's two systems are measured in the same run (it fuses their rankings or scores)."""
    given = {system.spec for system in systems}
    for system in systems:
        if isinstance(system, HybridSpec):
            missing = [part for part in (system.lexical, system.dense) if part not in given]
            if missing:
                fused = "rankings" if system.weight is None else "scores"
                raise UsageError(
                    f"{system.spec} fuses the {fused} of {system.lexical} and {system.dense}; give "
                    f"{' and '.join(missing)} among the systems too."
                )


def dense_systems(systems: list[RetrievalSystem]) -> list[SystemSpec]:
    return [system for system in systems if isinstance(system, SystemSpec)]


def check_system_names(systems: list[str], references: list[str]) -> None:
    """Each system given once, and every --paired reference one of them."""
    if len(set(systems)) < len(systems):
        raise UsageError("A system is given twice; give each once.")
    unknown = [reference for reference in references if reference not in systems]
    if unknown:
        raise UsageError(f"--paired {' '.join(unknown)}: a reference must be one of the compared systems.")


def load_tokenizer(spec: SystemSpec) -> PreTrainedTokenizerBase:
    tokenizer = AutoTokenizer.from_pretrained(spec.facts.path)
    # transformers builds a tokenizer of special tokens alone for a folder without tokenizer files
    if len(tokenizer) <= len(tokenizer.all_special_ids):
        raise UsageError(
            f"{spec.spec}: {spec.facts.path} has no tokenizer (no vocabulary beyond the special tokens); save the "
            "model's tokenizer there with tokenizer.save_pretrained(...)."
        )
    return tokenizer


def shared_tokenizer(systems: list[SystemSpec]) -> PreTrainedTokenizerBase:
    """The first system's tokenizer, after checking every system has one with the same vocabulary (the
    texts are token ids, built once for all)."""
    tokenizers = {}
    for spec in systems:
        if spec.facts.path not in tokenizers:
            tokenizers[spec.facts.path] = load_tokenizer(spec)
    first, *others = systems
    vocabulary = tokenizers[first.facts.path].get_vocab()
    for spec in others:
        if tokenizers[spec.facts.path].get_vocab() != vocabulary:
            raise UsageError(
                f"{spec.spec} has another vocabulary than {first.spec}; the systems must share one tokenizer, "
                "since they read the same documents."
            )
    return tokenizers[first.facts.path]


class Embedder:
    """A loaded system: normalised embeddings of queries (token ids) and of documents of one length."""

    def __init__(
        self,
        spec: SystemSpec,
        longest: int,
        device: torch.device,
        batch_tokens: int,
        token_states: Path | None = None,
    ):
        """`token_states`: a folder where a one-pass reading keeps each document's whole read (`KeptTokenStates`)."""
        require_sentence_transformers()
        self.spec = spec
        self.batch_tokens = batch_tokens
        path = spec.facts.path
        if spec.tisa is not None:
            limit = longest if reads_any_length(spec.tisa) else None
            self.model = to_tisa_sentence_transformer(path, spec.tisa, max_seq_length=limit, device=str(device))
        else:
            self.model = SentenceTransformer(path, device=str(device))
        self.model.eval()
        encoder = self.model[0].auto_model
        self.interpolation = PositionInterpolation(encoder) if spec.reading.stretches else None
        self.kept_states = (
            KeptTokenStates(token_states, self.model, spec.reading.name, str(replace(spec.spelling, readout=MEAN)))
            if token_states is not None and spec.reading.one_pass
            else None
        )

    def stretch(self, length: int) -> None:
        """Stretches the position table to `length` for a reading that does (at most the table's length reads the
        original table); nothing for the others."""
        if self.interpolation is not None:
            self.interpolation.stretch_to(length)

    @torch.no_grad()
    def embed(self, sequences: list[list[int]], progress: str | None = None) -> torch.Tensor:
        """(len(sequences), dim) normalised embeddings, read as given. Sequences of equal length are batched
        together (up to `batch_tokens` tokens a batch), so no batch needs padding or an attention mask."""
        by_length: dict[int, list[int]] = defaultdict(list)
        for index, sequence in enumerate(sequences):
            by_length[len(sequence)].append(index)
        batches = [
            indices[start : start + max(1, self.batch_tokens // length)]
            for length, indices in by_length.items()
            for start in range(0, len(indices), max(1, self.batch_tokens // length))
        ]
        device = self.model.device
        embeddings: list[torch.Tensor | None] = [None] * len(sequences)
        for batch in tqdm(batches, desc=progress, leave=False, disable=progress is None):
            input_ids = torch.tensor([sequences[index] for index in batch], device=device)
            pooled = self.model({"input_ids": input_ids})["sentence_embedding"].float()
            for index, embedding in zip(batch, F.normalize(pooled, dim=-1).cpu(), strict=True):
                embeddings[index] = embedding
        return torch.stack(embeddings)

    def read(self, sequences: list[list[int]], progress: str | None = None) -> torch.Tensor:
        """Normalised embeddings of `sequences` (documents or queries) as this system reads them, in order: one
        vector a text, the mean of its pieces' where its reading cuts it into several (chunk-and-average)."""
        by_length: dict[int, list[int]] = defaultdict(list)
        for index, sequence in enumerate(sequences):
            by_length[len(sequence)].append(index)
        embeddings = torch.empty(len(sequences), self.model.get_embedding_dimension())
        for length, indices in by_length.items():
            embeddings[indices] = self._read_equally_long([sequences[index] for index in indices], length, progress)
        return embeddings

    def _read_equally_long(self, sequences: list[list[int]], length: int, progress: str | None) -> torch.Tensor:
        table = self.spec.table_length
        pieces = [self.pieces(sequence) for sequence in sequences]
        if len(pieces[0]) > 1:
            return chunk_average(self.embed, sequences, table, progress)
        self.stretch(length)
        return self.embed([piece for (piece,) in pieces], progress)

    def pieces(self, sequence: list[int], size: int | None = None) -> list[list[int]]:
        """The sequences this system's reading cuts a document or query into, of at most `size` tokens (default T:
        its position table)."""
        return self.spec.reading.pieces(sequence, size or self.spec.table_length)

    @torch.no_grad()
    def read_tokens(self, sequence: list[int]) -> torch.Tensor:
        """(tokens, dim) normalised token states of a document or query as this system reads it (its `pieces`, the
        whole stretched by a stretching reading), each piece's [CLS] and [SEP] left out; on the model's device."""
        self.stretch(len(sequence))
        states = [
            self.model({"input_ids": torch.tensor([piece], device=self.model.device)})["token_embeddings"][0, 1:-1]
            for piece in self.pieces(sequence)
        ]
        return F.normalize(torch.cat(states).float(), dim=-1)

    def document_tokens(self, document: list[int]) -> torch.Tensor:
        """`read_tokens(document)`, taken from its kept whole read where this system keeps them (the same values:
        a one-pass reading reads one piece)."""
        if self.kept_states is None:
            return self.read_tokens(document)
        return F.normalize(self.token_states(document)[1:-1], dim=-1)

    def token_states(self, sequence: list[int]) -> torch.Tensor:
        """(tokens, dim) final token states of the whole sequence read in one forward pass ([CLS] and [SEP]
        included, stretched by a stretching reading), float32 on the model's device; kept and reused where this
        system keeps its whole reads."""
        if self.kept_states is None:
            return self._read_whole(sequence)
        return self.kept_states.read(sequence, self._read_whole, self.model.device)

    @torch.no_grad()
    def _read_whole(self, sequence: list[int]) -> torch.Tensor:
        self.stretch(len(sequence))
        input_ids = torch.tensor([sequence], device=self.model.device)
        return self.model({"input_ids": input_ids})["token_embeddings"][0].float()


def check_readouts(systems: list[SystemSpec], command: str) -> None:
    """`command` takes the read-outs it declares (`options.READOUTS_TAKEN`); another is refused before any model
    loads, naming the commands that take it."""
    taken = READOUTS_TAKEN[command]
    for system in systems:
        if system.readout not in taken:
            takers = [name for name, readouts in READOUTS_TAKEN.items() if system.readout in readouts]
            raise UsageError(
                f"{system.spec}: {command} does not take the {system.readout.prefix} read-out; "
                f"{spoken_list(takers, 'and')} {'does' if len(takers) == 1 else 'do'}."
            )
