"""What `tisa-hf adapt` writes for a sentence-transformers base (a local folder or `minilm` with `modules.json`):
the adapted checkpoint is also a sentence-transformers model, with the base's pooling and normalisation and a
stated reading limit, so `SentenceTransformer(OUTPUT_DIR)` (after `import tisa_hf`) embeds with it.

The limit (`max_seq_length`, recorded in `sentence_bert_config.json` and as the tokenizer's `model_max_length`)
is `--embedding-max-length` or the longest `--lengths`, the length the model was adapted for. Without a recorded
limit sentence-transformers would take min(tokenizer's `model_max_length`, `max_position_embeddings`): 512 for a
`replace` model that reads any length. `--train head` fits an MLM head for measurements and writes the checkpoint
only, as does a base without `modules.json`.

`--multi-vector` also writes `OUTPUT_DIR/multi-vector`, the adapted model as a `MultiVectorEncoder`
(`multivector/encoder.py`), from the saved run.
"""

from __future__ import annotations

from typing import Any

from ..common.checkpoints import CheckpointFacts, reads_any_length
from ..common.sentence_models import is_sentence_transformer
from ..config import TisaConfig
from ..errors import UsageError
from ..finetune.run_folder import RunFolder
from .arguments import AdaptArguments


def sentence_output_limit(facts: CheckpointFacts, tisa: TisaConfig | None, adapt_args: AdaptArguments) -> int | None:
    """The `max_seq_length` of the sentence-transformers model the run writes, or None when it writes none;
    checked before any weights load."""
    requested = adapt_args.embedding_max_length
    if adapt_args.train == "head" or not is_sentence_transformer(facts.path):
        if requested is not None:
            why = "--train head writes an MLM head" if adapt_args.train == "head" else f"{facts.name} is not one"
            raise UsageError(
                f"--embedding-max-length sets how many tokens the sentence-transformers model written for a "
                f"sentence-transformers base reads, and {why} (no modules.json); leave it out."
            )
        return None
    if requested is None:
        return max(adapt_args.lengths)
    if not reads_any_length(tisa) and requested > facts.table_length:
        raise UsageError(
            f"--embedding-max-length {requested} is longer than {facts.name}'s {facts.positions.describes} "
            f"({facts.table_length} positions), which TISA mode='add' keeps; ask for at most {facts.table_length}, "
            "or use --tisa.mode replace, which reads any length."
        )
    return requested


def reading_length_line(record: dict[str, Any]) -> str | None:
    """The closing line of a run that wrote a sentence-transformers model: how many tokens it reads and the
    option that sets it (a `replace` model adapted for long inputs would otherwise embed the longest `--lengths`
    without a word)."""
    limit = record["adaptation"].get("max_seq_length")
    if limit is None:
        return None
    config = record["config"]
    why = "--embedding-max-length" if config.get("embedding_max_length") else "the longest --lengths, by default"
    return (
        f"The sentence-transformers model in {config['output_dir']} reads {limit} tokens per input ({why}); "
        "--embedding-max-length N sets another length."
    )


def multi_vector_line(record: dict[str, Any]) -> str | None:
    """The closing line of a run that wrote a `MultiVectorEncoder` (`--multi-vector`): where it is."""
    if not record["config"].get("multi_vector"):
        return None
    return (
        f"The multi-vector model (one vector a token, mean MaxSim) is in "
        f"{RunFolder(record['config']['output_dir']).multi_vector_dir}: MultiVectorEncoder(path) after import tisa_hf."
    )


def closing_lines(record: dict[str, Any]) -> str | None:
    """What a run says last: how many tokens its sentence-transformers model reads, where its multi-vector model is."""
    lines = [line for line in (reading_length_line(record), multi_vector_line(record)) if line]
    return "\n".join(lines) or None
