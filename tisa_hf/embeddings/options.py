"""The options of `tisa-hf longembed`, `qmsum`, `qmsum-passages`, `context-passages`, `spans` and `sts`; light
(argparse and tisa_hf's light modules only), so that `--help` answers without importing torch. Every default is shown
in `--help`."""

from __future__ import annotations

import argparse

from ..common.hub_access import WIKITEXT_HELP
from ..common.options import (
    add_batch_tokens_argument,
    add_device_argument,
    add_out_argument,
    add_overwrite_argument,
    add_paired_arguments,
    add_work_argument,
    positive_int,
)
from ..common.spellings import (
    CHUNK,
    GRAMMAR,
    INTERP,
    LATE,
    MEAN,
    READINGS,
    READOUTS,
    WHOLE,
    Reading,
    Readout,
    model_spellings,
)
from ..finetune.task_tables import GLUE_HUB_DATASET
from .lexical import TEXT_SYSTEMS_HELP

DEFAULT_QMSUM_CAP = 32768
DEFAULT_PASSAGES_CAP = 40960  # above the longest meeting (36,718 tokens of MiniLM's): every window is read
DEFAULT_WINDOW_TOKENS = 256
DEFAULT_LENGTHS = [256, 512, 1024, 2048, 4096, 8192]
TASK_NAMES = ("passkey", "needle")
ENGINES = ("local", "ray")  # where `tisa-hf encode` and `tisa-hf index` embed their parts
LONGEMBED, QMSUM, SPANS, STS = "tisa-hf longembed", "tisa-hf qmsum", "tisa-hf spans", "tisa-hf sts"
QMSUM_PASSAGES = "tisa-hf qmsum-passages"
CONTEXT_PASSAGES = "tisa-hf context-passages"
DEFAULT_QUERY_WORDS = 3
# The read-outs each command takes (`common/spellings.py`); the retrieval commands over whole documents take every
# one, the passage task none beyond one vector or one a token per window
READOUTS_TAKEN: dict[str, tuple[Readout, ...]] = {
    LONGEMBED: (MEAN, LATE),
    QMSUM: READOUTS,
    QMSUM_PASSAGES: (MEAN, LATE),
    CONTEXT_PASSAGES: (MEAN, LATE),
    SPANS: READOUTS,
    STS: (MEAN,),
}
# The readings each command takes: every one, but for the passage tasks, where a window read apart is chunk:'s
READINGS_TAKEN: dict[str, tuple[Reading, ...]] = {command: READINGS for command in READOUTS_TAKEN} | {
    QMSUM_PASSAGES: (WHOLE, CHUNK, INTERP),
    CONTEXT_PASSAGES: (WHOLE, CHUNK, INTERP),
}
# the commands that take BM25 and hybrids too
TEXT_SYSTEMS = (LONGEMBED, QMSUM, QMSUM_PASSAGES, CONTEXT_PASSAGES, SPANS)


def systems_help(command: str) -> str:
    """The systems `command` takes, as its `--help` gives them."""
    spellings = model_spellings(READOUTS_TAKEN[command], READINGS_TAKEN[command])
    spellings |= TEXT_SYSTEMS_HELP if command in TEXT_SYSTEMS else {}
    phrases = "; ".join(f"{spelling} ({help})" for spelling, help in spellings.items())
    return f"Systems, spelled {GRAMMAR} (MODEL: a folder, Hub id or minilm): {phrases}."


def systems_table() -> str:
    """The Markdown table of every system spelling, what it does and the commands that take it (docs/long-documents.md
    holds it; tests/test_spellings.py holds it to this)."""
    takers = {spelling: list(READOUTS_TAKEN) for spelling in model_spellings()}
    for reading in READINGS:
        takers[f"{reading.prefix}MODEL"] = [command for command, taken in READINGS_TAKEN.items() if reading in taken]
    for readout in READOUTS:
        takers[f"{readout.prefix}SYSTEM"] = [command for command, taken in READOUTS_TAKEN.items() if readout in taken]
    takers |= {spelling: list(TEXT_SYSTEMS) for spelling in TEXT_SYSTEMS_HELP}
    rows = [
        f"| `{spelling}` | {help} | {', '.join(command.removeprefix('tisa-hf ') for command in takers[spelling])} |"
        for spelling, help in (model_spellings() | TEXT_SYSTEMS_HELP).items()
    ]
    return "\n".join(["| spelling | reads | commands |", "|---|---|---|", *rows])


def new_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """A parser whose help shows every option's default."""
    return argparse.ArgumentParser(prog=prog, description=description, formatter_class=DefaultsHelpFormatter)


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's defaults formatter, quiet where there is nothing to show (no default, or a switch)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or action.default is False or action.default == [] or action.required:
            return action.help or ""
        return super()._get_help_string(action)


def longembed_parser() -> argparse.ArgumentParser:
    parser = new_parser(
        LONGEMBED,
        "LongEmbed's passkey and needle retrieval (Acc@1) against document length, rebuilt offline.",
    )
    parser.add_argument("systems", nargs="+", help=systems_help(LONGEMBED))
    add_out_argument(parser, "Folder for longembed.json and longembed.png.")
    add_work_argument(parser, "every system's scores of each cell and the document embeddings of a cell in progress")
    parser.add_argument("--tasks", nargs="+", choices=TASK_NAMES, default=list(TASK_NAMES))
    parser.add_argument(
        "--lengths",
        type=positive_int,
        nargs="+",
        default=DEFAULT_LENGTHS,
        help="Document lengths in tokens of the models' tokenizer, [CLS] and [SEP] counted.",
    )
    parser.add_argument("--documents", type=positive_int, default=100, help="Candidate documents per length (<= 100).")
    parser.add_argument("--queries", type=positive_int, default=50, help="Queries per length (<= --documents).")
    parser.add_argument(
        "--text", help=f"Plain text the needle task's documents are cut from ({WIKITEXT_HELP % 'test'})."
    )
    parser.add_argument("--seed", type=int, default=0, help="Seed of the documents (needles, keys, positions).")
    add_batch_tokens_argument(parser)
    add_device_argument(parser)
    add_paired_arguments(parser, "system's Acc@1 minus REF's", "the queries")
    add_overwrite_argument(parser, "Start over instead of resuming an existing longembed.json.")
    return parser


def sts_parser() -> argparse.ArgumentParser:
    parser = new_parser(
        STS,
        "Zero-shot STS-B: Spearman (x100) of the pairs' cosine similarities against the gold scores, no "
        "fine-tuning (sentence-transformers' evaluation of all-MiniLM-L6-v2).",
    )
    parser.add_argument("systems", nargs="+", help=systems_help(STS))
    add_out_argument(parser, "Folder for sts.json.")
    parser.add_argument(
        "--data",
        help=f"GLUE's STS-B TSV, dev.tsv, the labelled split (default: its validation split from the Hub, "
        f"{GLUE_HUB_DATASET} stsb).",
    )
    add_batch_tokens_argument(parser)
    add_device_argument(parser)
    add_paired_arguments(parser, "system's Spearman minus REF's", "the pairs")
    add_overwrite_argument(parser, "Score every system again instead of adding to an existing sts.json.")
    return parser


def qmsum_parser() -> argparse.ArgumentParser:
    parser = new_parser(
        QMSUM,
        "LongEmbed's QMSum retrieval (nDCG@10, Acc@1, MRR@10): meeting summaries find their meeting among 197 "
        "transcripts of 1.5k-37k tokens, rebuilt offline from QMSum's files.",
    )
    parser.add_argument("systems", nargs="+", help=systems_help(QMSUM))
    add_out_argument(parser, "Folder for qmsum.json, qmsum.md and qmsum.png.")
    add_qmsum_arguments(parser)
    add_corpus_arguments(parser)
    return parser


def add_qmsum_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the QMSum commands' data (`qmsum`, `qmsum-passages`)."""
    parser.add_argument(
        "--data", required=True, help="QMSum's meetings: the folder of its train/ and val/ folders (data/ALL)."
    )
    parser.add_argument(
        "--meetings",
        type=positive_int,
        help="Only the first N meetings and the queries about them (a smoke run; default: all 197).",
    )


def passages_parser() -> argparse.ArgumentParser:
    parser = new_parser(
        QMSUM_PASSAGES,
        "QMSum's query-based passage retrieval (nDCG@10, Recall@10, Recall@50): each specific query ranks windows of "
        "W tokens within its own meeting and across all meetings, its relevant windows those holding its relevant "
        "turns; windows read apart (chunk:) against windows pooled from the whole meeting's read (late chunking).",
    )
    parser.add_argument("systems", nargs="+", help=systems_help(QMSUM_PASSAGES))
    add_out_argument(parser, "Folder for qmsum-passages.json, .md and .png.")
    add_qmsum_arguments(parser)
    add_window_arguments(parser, "meeting")
    add_corpus_arguments(
        parser,
        DEFAULT_PASSAGES_CAP,
        "A meeting's tokens, [CLS] and [SEP] counted: a longer one is cut, and its windows end there",
    )
    return parser


def add_window_arguments(parser: argparse.ArgumentParser, document: str) -> None:
    """The options of a task whose candidates are windows of its documents (`qmsum-passages`, `context-passages`)."""
    parser.add_argument(
        "--window-tokens",
        type=positive_int,
        default=DEFAULT_WINDOW_TOKENS,
        help=f"W: a window is W - 2 of a {document}'s tokens, W with the [CLS] and [SEP] it is read apart between.",
    )
    parser.add_argument(
        "--tokenizer",
        default="minilm",
        help="The model whose tokenizer cuts the windows (BM25's too); every model system must share its vocabulary.",
    )


def context_passages_parser() -> argparse.ArgumentParser:
    parser = new_parser(
        CONTEXT_PASSAGES,
        "Passages that need their article (nDCG@10, Recall@10, Recall@50): WikiText articles cut into windows of W "
        "tokens whose article is named only outside them; each window's query (the article's title, its section's "
        "heading and a few of its own words) ranks the windows of its article and of all articles. The development "
        "task of training that rewards context (QMSum is kept for evaluation).",
    )
    parser.add_argument("systems", nargs="+", help=systems_help(CONTEXT_PASSAGES))
    add_out_argument(parser, "Folder for context-passages.json, .md and .png.")
    parser.add_argument(
        "--data",
        help=f"WikiText-style text (` = Title = ` lines start articles); held out ({WIKITEXT_HELP % 'test'}).",
    )
    parser.add_argument(
        "--articles", type=positive_int, help="Only the first N articles (a smoke run; default: every article)."
    )
    add_window_arguments(parser, "article")
    add_query_arguments(parser)
    add_corpus_arguments(parser)
    return parser


def add_query_arguments(parser: argparse.ArgumentParser) -> None:
    """How a window's query is drawn (`context-passages`, `context-train`)."""
    parser.add_argument(
        "--query-words",
        type=positive_int,
        default=DEFAULT_QUERY_WORDS,
        help="Words of 5 letters or more drawn from the window into its query, after the title and heading.",
    )
    parser.add_argument("--seed", type=int, default=0, help="Seed of the words drawn into the queries.")


def spans_parser() -> argparse.ArgumentParser:
    parser = new_parser(
        SPANS,
        "Passage-to-article retrieval (nDCG@10, Acc@1, MRR@10, and Acc@1 by how deep the passage sits): passages "
        "cut from WikiText articles find their article among all of them; the development task for choosing how "
        "to read long documents (QMSum is kept for evaluation).",
    )
    parser.add_argument("systems", nargs="+", help=systems_help(SPANS))
    add_out_argument(parser, "Folder for spans.json, spans.md and spans.png.")
    parser.add_argument(
        "--data",
        help=f"WikiText-style text (` = Title = ` lines start articles); held out ({WIKITEXT_HELP % 'test'}).",
    )
    parser.add_argument("--spans-per-article", type=positive_int, default=3, help="Passages cut from each article.")
    parser.add_argument("--span-words", type=positive_int, default=48, help="Words in a passage.")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the passages' positions.")
    parser.add_argument(
        "--articles", type=positive_int, help="Only the first N articles (a smoke run; default: every article)."
    )
    add_corpus_arguments(parser)
    return parser


def add_corpus_arguments(
    parser: argparse.ArgumentParser,
    cap: int = DEFAULT_QMSUM_CAP,
    cap_help: str = "A document's tokens for the models, [CLS] and [SEP] counted: longer ones are cut (BM25 reads all)",
) -> None:
    """The options that every corpus-retrieval command (`qmsum`, `qmsum-passages`, `spans`) shares with their one
    runner; `cap` and `cap_help`: --max-tokens' default and help."""
    parser.add_argument("--max-tokens", type=positive_int, default=cap, help=f"{cap_help}.")
    add_work_argument(parser, "each model system's document embeddings and every system's scores")
    parser.add_argument(
        "--token-states",
        metavar="DIR",
        help="Keep each document's whole read (final token states, float32: about 1.5 KB a token for MiniLM) in DIR "
        "and reuse it: a whole-read system's late: twin and other --window-tokens then read nothing again.",
    )
    add_batch_tokens_argument(parser)
    add_device_argument(parser)
    add_paired_arguments(parser, "system's nDCG@10 (Acc@1, MRR@10) minus REF's", "the queries")
    add_overwrite_argument(parser)


def encode_parser() -> argparse.ArgumentParser:
    parser = new_parser(
        "tisa-hf encode",
        "Embed a corpus of (long) documents with a sentence-transformers model, TISA or not: in parts that are "
        "saved as they finish (an interrupted run resumes), on one device or several processes.",
    )
    parser.add_argument("model", help="A sentence-transformers folder or Hub id (a TISA one too), or minilm.")
    add_encoding_arguments(parser, "Folder for embeddings.npy, encode.json and the parts.")
    parser.add_argument(
        "--max-seq-length",
        type=positive_int,
        help="Tokens the model reads of a document (default: the model's own setting; a TISA replace-mode model "
        "reads any length).",
    )
    return parser


def add_encoding_arguments(parser: argparse.ArgumentParser, out_help: str) -> None:
    """The options of a command that encodes a corpus in resumable parts (`encode.encode_in_parts`): `tisa-hf
    encode` and `tisa-hf index`."""
    parser.add_argument(
        "--input", required=True, help="A .jsonl file (one object a line) or a text file (one document a line)."
    )
    parser.add_argument("--text-field", default="text", help="The field holding a .jsonl object's text.")
    add_out_argument(parser, out_help)
    parser.add_argument(
        "--devices",
        nargs="+",
        help="Devices of sentence-transformers' multi-process pool, one process each (cuda:0 cuda:1, or cpu cpu); "
        "one device runs in this process (default: cuda when available, else cpu).",
    )
    parser.add_argument("--part-size", type=positive_int, default=64, help="Documents saved together.")
    parser.add_argument("--batch-size", type=positive_int, default=4, help="Documents per forward pass.")
    add_overwrite_argument(parser)
    add_engine_arguments(parser)


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """--engine and the options of its Ray engine (`ray_cluster.py`, `ray_parts.py`); the Ray options default to
    None, so that one given without --engine ray is refused rather than ignored."""
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default=ENGINES[0],
        help="local: this machine (one device, or --devices' processes); ray: the actors of a Ray cluster, one copy "
        'of the model each (pip install "tisa-hf[ray]"), writing their parts into --out, which every node must see.',
    )
    parser.add_argument(
        "--ray-address",
        help="The cluster of --engine ray: HOST:PORT of its head (ray start --head), ray://HOST:PORT (Ray Client) or "
        "auto (the cluster this machine belongs to); default: a cluster started on this machine for the run.",
    )
    parser.add_argument(
        "--actors",
        type=positive_int,
        help="Copies of the model embedding parts at once (default: as many as the cluster's CPUs or GPUs hold).",
    )
    parser.add_argument(
        "--actor-cpus",
        type=resource_amount,
        help="CPUs an actor holds, and torch's threads in it (default: 1).",
    )
    parser.add_argument(
        "--actor-gpus",
        type=resource_amount,
        help="GPUs an actor holds, a fraction to share one (default: 1 where the cluster has GPUs, else 0).",
    )


def resource_amount(text: str) -> float:
    """An argparse type: an amount of a Ray resource, a number of at least 0 (a fraction shares the unit)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value
