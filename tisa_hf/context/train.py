"""`tisa-hf context-train`: training that rewards reading the whole document, on sentence-transformers'
`SentenceTransformerTrainer`.

The rows (`training_rows.py`) are built and every setting checked before the model loads. The loss is
`InSequenceLoss` (`loss.py`): each window, pooled from its whole document's read, must be found by its query among
its document's other windows and, by default, the batch's other documents' (sentence-transformers'
NO_DUPLICATES batch sampler keeps a document to one row a batch, so that no window is its own negative). `--anchor`
mixes in, one step in two (round robin), the windows read apart, whose embeddings must keep the starting model's
(sentence-transformers' `EmbedDistillLoss`, cosine), so that short texts such as STS-B's are embedded as before.

Writes to --output-dir the trained model as a sentence-transformers folder (reading as many tokens as the starting
model's), `context_train.json` (the settings, the row counts, the trainer's log and the wall time). The trainer's
checkpoints live in `checkpoints/` until the run finishes: a rerun resumes from the latest; a finished run is
refused unless --overwrite.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments
from sentence_transformers.base.sampler import BatchSamplers, MultiDatasetBatchSamplers
from sentence_transformers.sentence_transformer.losses import EmbedDistillLoss
from transformers import AutoTokenizer
from transformers.trainer_utils import get_last_checkpoint

from ..common.checkpoints import CheckpointFacts, reads_any_length
from ..common.hub_access import model_source, wikitext_file
from ..common.machine import machine, versions
from ..common.result_files import write_record
from ..common.sentence_models import check_mean_pooling, is_sentence_transformer, save_sentence_transformer
from ..errors import UsageError
from .articles import read_titled_articles
from .loss import LOSS_NAME, InSequenceLoss
from .options import context_train_parser
from .training_rows import TrainingRows, build_training_rows

logger = logging.getLogger(__name__)
RECORD_FILE = "context_train.json"
CHECKPOINTS = "checkpoints"
SETTINGS_FILE = "settings.json"  # in CHECKPOINTS: the settings an interrupted run resumes with
ANCHOR = "anchor"


def check_request(args: argparse.Namespace) -> Path:
    """The model's folder, after every check that needs no weights."""
    out = Path(args.output_dir)
    if (out / RECORD_FILE).is_file() and not args.overwrite:
        raise UsageError(f"{out} holds a finished run ({RECORD_FILE}); choose another --output-dir, or --overwrite.")
    if not 0 <= args.warmup_ratio < 1:
        raise UsageError(f"--warmup-ratio is a share of the steps, in [0, 1); got {args.warmup_ratio}.")
    if args.window_tokens < 3:
        raise UsageError(f"--window-tokens {args.window_tokens}: a window needs 3 tokens at least.")
    if args.train_batch_size < 2 and args.negatives == "in-batch":
        raise UsageError("--negatives in-batch needs 2 or more documents a batch; give --train-batch-size 2 or more.")
    folder = Path(model_source(args.model, needs_tokenizer=True).path)
    if not is_sentence_transformer(folder):
        raise UsageError(f"--model {args.model} is not a sentence-transformers folder (no modules.json); give one.")
    check_mean_pooling(folder, "context-train pools each window as a mean of token states, as the queries are pooled")
    facts = CheckpointFacts.read(str(folder))
    if not reads_any_length(facts.tisa) and args.document_tokens > facts.table_length:
        raise UsageError(
            f"--document-tokens {args.document_tokens} is longer than {args.model}'s {facts.positions.describes} "
            f"({facts.table_length}); give at most {facts.table_length}, or a TISA replace-mode model."
        )
    return folder


def settings_of(args: argparse.Namespace) -> dict[str, Any]:
    """What a run is: every option but --overwrite."""
    return {key: value for key, value in vars(args).items() if key != "overwrite"}


def resumed_checkpoint(checkpoints: Path, settings: dict[str, Any]) -> str | None:
    """The latest checkpoint of an interrupted run of the same settings (None: none yet, and the settings are
    written for a later resume); a run of other settings is refused."""
    written = checkpoints / SETTINGS_FILE
    if written.is_file():
        before = json.loads(written.read_text(encoding="utf-8"))
        changed = sorted(key for key in settings.keys() | before.keys() if settings.get(key) != before.get(key))
        if changed:
            raise UsageError(
                f"{checkpoints.parent} holds an interrupted run of other settings ({', '.join(changed)}); rerun with "
                "its settings to resume, or pass --overwrite to start over."
            )
    else:
        checkpoints.mkdir(parents=True, exist_ok=True)
        written.write_text(json.dumps(settings, indent=2), encoding="utf-8")
    resume = get_last_checkpoint(str(checkpoints))
    if resume:
        logger.info("Resuming from %s", resume)
    return resume


def training_args(args: argparse.Namespace) -> SentenceTransformerTrainingArguments:
    return SentenceTransformerTrainingArguments(
        output_dir=str(Path(args.output_dir) / CHECKPOINTS),
        max_steps=args.max_steps,
        per_device_train_batch_size=args.train_batch_size,
        learning_rate=args.learning_rate,
        warmup_steps=round(args.warmup_ratio * args.max_steps),
        save_strategy="steps",
        save_steps=args.checkpoint_steps,
        save_total_limit=2,
        logging_steps=max(1, min(10, args.max_steps // 10)),
        seed=args.seed,
        batch_sampler=BatchSamplers.NO_DUPLICATES,
        multi_dataset_batch_sampler=MultiDatasetBatchSamplers.ROUND_ROBIN,
        report_to="none",
        dataloader_pin_memory=torch.cuda.is_available(),
        disable_tqdm=not sys.stderr.isatty(),
    )


def datasets_and_losses(
    model: SentenceTransformer, rows: TrainingRows, args: argparse.Namespace
) -> tuple[Dataset | dict[str, Dataset], InSequenceLoss | dict[str, Any]]:
    """The trainer's dataset and loss: the rows alone, or with `--anchor` the rows and the anchor texts by name."""
    in_sequence = InSequenceLoss(model, args.window_tokens, args.scale, args.negatives == "in-batch")
    rows_dataset = Dataset.from_dict(rows.columns())
    if not args.anchor:
        return rows_dataset, in_sequence
    targets = model.encode(rows.window_texts, batch_size=32, convert_to_numpy=True)  # the starting model's
    anchor = Dataset.from_dict({"text": rows.window_texts, "label": targets.tolist()})
    losses = {LOSS_NAME: in_sequence, ANCHOR: EmbedDistillLoss(model, distance_metric="cosine")}
    return {LOSS_NAME: rows_dataset, ANCHOR: anchor}, losses


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    folder = check_request(args)
    out = Path(args.output_dir)
    if args.overwrite:
        shutil.rmtree(out / CHECKPOINTS, ignore_errors=True)
    args.train_text = args.train_text or str(wikitext_file("validation", "--train-text"))
    articles = read_titled_articles(args.train_text, args.articles)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    rows = build_training_rows(
        articles,
        tokenizer,
        args.window_tokens,
        args.document_tokens,
        args.query_words,
        args.queries == "titled",
        args.seed,
    )
    resume = resumed_checkpoint(out / CHECKPOINTS, settings_of(args))
    model = SentenceTransformer(str(folder))
    reading = model.max_seq_length
    model.max_seq_length = max(reading, args.document_tokens)  # checked: the model reads a document whole
    dataset, loss = datasets_and_losses(model, rows, args)
    trainer = SentenceTransformerTrainer(model=model, args=training_args(args), train_dataset=dataset, loss=loss)
    trainer.train(resume_from_checkpoint=resume)
    model.max_seq_length = reading
    save_sentence_transformer(model, out)
    record = {
        "settings": settings_of(args),
        "rows": len(rows.queries),
        "documents": len(set(rows.documents)),
        "articles": len(articles),
        "anchor_texts": len(rows.window_texts) if args.anchor else 0,
        "log_history": trainer.state.log_history,
        "resumed_from": resume,
        "wall_time_s": round(time.perf_counter() - started, 1),
        "versions": versions(),
        "machine": machine(model.device),
    }
    write_record(record, out / RECORD_FILE)
    shutil.rmtree(out / CHECKPOINTS, ignore_errors=True)
    return record


def main(argv: list[str] | None = None) -> int:
    record = run(context_train_parser().parse_args(sys.argv[1:] if argv is None else argv))
    # a logging step of anchor batches alone has no in-sequence loss (NaN)
    losses = [entry[LOSS_NAME] for entry in record["log_history"] if math.isfinite(entry.get(LOSS_NAME, math.nan))]
    print(f"{record['rows']} rows of {record['documents']} documents; {LOSS_NAME} loss {losses[0]} -> {losses[-1]}")
    return 0
