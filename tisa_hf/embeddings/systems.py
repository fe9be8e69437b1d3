"""The embedding systems `tisa-hf longembed` compares, as given on its command line (spelled as
`common/spellings.py` reads them), and how each embeds.

A system is a model (a folder, Hub id or `minilm`; a sentence-transformers folder brings its own pooling,
otherwise mean pooling) read in one of these ways:
- `MODEL`: the whole document. A plain or TISA `add` model reads at most its position table; a TISA `replace`
  model (an adapted one, say) reads any length.
- `trunc:MODEL`: the first T tokens of the document (T: the position table; the final [SEP] kept), as
  sentence-transformers truncates.
- `chunk:MODEL`: chunk-and-average: the document's tokens cut into chunks of T - 2, each read as
  `[CLS] chunk [SEP]`; the mean of the normalised chunk embeddings, normalised again.
- `interp:MODEL`: position interpolation (tisa_hf/common/interpolation.py) to the document's length (a query
  within the table reads the original table).
Queries are read the same way as documents.
- `tisa:MODE:S:MODEL`: MODEL given TISA with S kernels in MODE, fitted to its positional profiles and not
  adapted (`tisa:replace:5:minilm`).
- `max:` before a spelling (the retrieval commands `qmsum` and `spans`): a document is one vector per window of
  T - 2 tokens (`read_windows`) and its score is its best window's; the query is one vector as usual.
- `late:` before a spelling (the same commands): a document and a query are their token vectors (`read_tokens`),
  scored by late interaction (ColBERT's MaxSim: the mean over the query's tokens of each one's best cosine
  similarity to a document token).
Every embedding is normalised, and documents are ranked by cosine similarity to the query.

Two systems embed nothing (the retrieval commands take them; `lexical.py`, `ranking.py`):
- `bm25` (`bm25:TOKENIZER`): BM25 over the documents' text.
- `hybrid:BM25+SYSTEM`: reciprocal-rank fusion (k = 60) of the rankings of a BM25 system and a dense one, both
  given as systems of the same run too (`hybrid:bm25+chunk:minilm`): what practitioners deploy.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from ..common.checkpoints import CheckpointFacts, reads_any_length
from ..common.interpolation import PositionInterpolation
from ..common.pooling import chunk_average, chunks_of
from ..common.sentence_models import SentenceTransformer, require_sentence_transformers, to_tisa_sentence_transformer
from ..common.spellings import TISA_PREFIX, parse_spelling
from ..config import TisaConfig
from ..errors import UsageError
from .lexical import BM25_NAME, bm25_tokenizer
from .ranking import LateInteraction

HYBRID_PREFIX = "hybrid:"


@dataclass(frozen=True)
class SystemSpec:
    """A compared system: `spec` as given, how it reads a document (`full`, `trunc`, `chunk`, `interp`), the
    model's facts, the TISA it is given here (`tisa:` spellings) and its read-out (`mean` or `max`)."""

    spec: str
    reading: str
    facts: CheckpointFacts
    tisa: TisaConfig | None = None
    readout: str = "mean"

    @classmethod
    def parse(cls, spec: str) -> SystemSpec:
        spelling = parse_spelling(spec)
        reading, model, tisa = spelling.reading, spelling.model, spelling.tisa
        try:
            facts = CheckpointFacts.read(model)
        except ValueError as error:
            raise UsageError(f"{spec}: {error}") from None
        if (tisa is not None or reading == "interp") and facts.tisa is not None:
            raise UsageError(f"{spec}: {model} already has TISA ({facts.tisa}); give the model it was made from.")
        return cls(spec, reading, facts, tisa, spelling.readout)

    @property
    def table_length(self) -> int:
        return self.facts.table_length

    @property
    def effective_tisa(self) -> TisaConfig | None:
        return self.tisa or self.facts.tisa

    def reads(self, length: int) -> bool:
        if self.reading != "full":
            return True
        tisa = self.effective_tisa
        return reads_any_length(tisa) or length <= self.table_length

    def check_lengths(self, lengths: Iterable[int]) -> None:
        too_long = [length for length in lengths if not self.reads(length)]
        if too_long:
            has = "TISA mode='add' keeps its position embeddings" if self.effective_tisa else "it has no TISA"
            model = self.spec.removeprefix(TISA_PREFIX).split(":", 2)[-1] if self.tisa else self.spec
            raise UsageError(
                f"{self.spec} cannot read {too_long[0]} tokens: its position table holds {self.table_length} and "
                f"{has}. Give lengths up to {self.table_length}, or read longer documents with trunc:{model}, "
                f"chunk:{model}, interp:{model} or a replace-mode model."
            )


@dataclass(frozen=True)
class LexicalSpec:
    """BM25 over the documents' text with a named tokenizer (`lexical.py`); it reads any length."""

    spec: str
    tokenizer: str


@dataclass(frozen=True)
class HybridSpec:
    """Reciprocal-rank fusion of a BM25 system's ranking and a dense system's, by their spellings."""

    spec: str
    lexical: str
    dense: str


RetrievalSystem = SystemSpec | LexicalSpec | HybridSpec


def parse_system(spec: str) -> RetrievalSystem:
    """A system of a retrieval command: BM25, a hybrid (its parts checked here), or a model read some way."""
    if spec == BM25_NAME or spec.startswith(f"{BM25_NAME}:"):
        return LexicalSpec(spec, bm25_tokenizer(spec))
    if spec.startswith(HYBRID_PREFIX):
        lexical, _, dense = spec.removeprefix(HYBRID_PREFIX).partition("+")
        if not isinstance(parse_system(lexical), LexicalSpec) or not isinstance(parse_system(dense), SystemSpec):
            raise UsageError(f"{spec}: write hybrid:BM25+SYSTEM, e.g. hybrid:bm25+chunk:minilm.")
        return HybridSpec(spec, lexical, dense)
    return SystemSpec.parse(spec)


def check_hybrid_parts(systems: list[RetrievalSystem]) -> None:
    """Every hybrid's two systems are measured in the same run (the hybrid fuses their rankings)."""
    given = {system.spec for system in systems}
    for system in systems:
        if isinstance(system, HybridSpec):
            missing = [part for part in (system.lexical, system.dense) if part not in given]
            if missing:
                raise UsageError(
                    f"{system.spec} fuses the rankings of {system.lexical} and {system.dense}; give "
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

    def __init__(self, spec: SystemSpec, longest: int, device: torch.device, batch_tokens: int):
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
        self.interpolation = PositionInterpolation(encoder) if spec.reading == "interp" else None

    def _stretch(self, length: int) -> None:
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
        """Normalised embeddings of `sequences` (documents or queries) as this system reads them, in order."""
        by_length: dict[int, list[int]] = defaultdict(list)
        for index, sequence in enumerate(sequences):
            by_length[len(sequence)].append(index)
        embeddings = torch.empty(len(sequences), self.model.get_embedding_dimension())
        for length, indices in by_length.items():
            embeddings[indices] = self._read_equally_long([sequences[index] for index in indices], length, progress)
        return embeddings

    def _read_equally_long(self, sequences: list[list[int]], length: int, progress: str | None) -> torch.Tensor:
        table = self.spec.table_length
        if self.spec.reading == "trunc" and length > table:
            return self.embed([sequence[: table - 1] + sequence[-1:] for sequence in sequences], progress)
        if self.spec.reading == "chunk" and length > table:
            return chunk_average(self.embed, sequences, table, progress)
        self._stretch(length)  # interpolation: at most the table's length reads the original table
        return self.embed(sequences, progress)

    def document_vectors(self, document: list[int]) -> torch.Tensor:
        """The document as this system embeds it: one row, or one per window (`max:`); `late:` documents are read
        by `read_tokens`."""
        if self.spec.readout == "max":
            return self.read_windows(document)
        return self.read([document])

    def late_scorer(self, queries: list[list[int]]) -> Callable[[list[int]], np.ndarray]:
        """A function reading a document's token states and scoring them by MaxSim against the queries' (`late:`):
        a (1, queries) row, what a run keeps of the document; the products run on the model's device, where the
        token states already are."""
        device = self.model.device
        late = LateInteraction([self.read_tokens(query) for query in queries], None if device.type == "cpu" else device)
        return lambda document: late(self.read_tokens(document))[None]

    def token_pieces(self, sequence: list[int]) -> list[list[int]]:
        """The sequences `read_tokens` reads of a document or query: the first T tokens for `trunc:` (the final
        [SEP] kept), each chunk of T tokens for `chunk:`, else the whole (T: the position table)."""
        table = self.spec.table_length
        if self.spec.reading == "trunc" and len(sequence) > table:
            return [sequence[: table - 1] + sequence[-1:]]
        if self.spec.reading == "chunk" and len(sequence) > table:
            return chunks_of(sequence, table)
        return [sequence]

    @torch.no_grad()
    def read_tokens(self, sequence: list[int]) -> torch.Tensor:
        """(tokens, dim) normalised token states of a document or query as this system reads it (`token_pieces`,
        the whole stretched for `interp:`), each piece's [CLS] and [SEP] left out; on the model's device."""
        self._stretch(len(sequence))  # interp: reads the whole sequence
        states = [
            self.model({"input_ids": torch.tensor([piece], device=self.model.device)})["token_embeddings"][0, 1:-1]
            for piece in self.token_pieces(sequence)
        ]
        return F.normalize(torch.cat(states).float(), dim=-1)

    @torch.no_grad()
    def read_windows(self, document: list[int]) -> torch.Tensor:
        """The document as (windows, dim) normalised vectors, one per window of T - 2 tokens (T: the position
        table), at the chunks' boundaries: the chunks' own embeddings for `chunk:`, else the mean of the whole
        document's token states over each window's tokens."""
        table = self.spec.table_length
        if self.spec.reading == "chunk":
            return self.embed(chunks_of(document, table))
        self._stretch(len(document))
        input_ids = torch.tensor([document], device=self.model.device)
        states = self.model({"input_ids": input_ids})["token_embeddings"][0].float()
        body, step = states[1:-1], table - 2
        windows = torch.stack([body[start : start + step].mean(0) for start in range(0, len(body), step)])
        return F.normalize(windows, dim=-1).cpu()


def check_readouts(systems: list[SystemSpec], command: str, readouts: tuple[str, ...] = ("mean",)) -> None:
    """`command` takes the read-outs `readouts` (`mean`: one vector a text); another is refused before any model
    loads."""
    for system in systems:
        if system.readout not in readouts:
            raise UsageError(
                f"{system.spec}: {command} does not take the {system.readout}: read-out; tisa-hf qmsum and tisa-hf "
                "spans do."
            )
