"""Settings of `tisa-hf adapt`: the fine-tuning dataclasses with adaptation's defaults, and the adaptation ones."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..errors import UsageError
from ..finetune.arguments import ModelArguments, TisaArguments, TrainingArguments
from ..packaged import MINILM_ALIAS


@dataclass
class AdaptModelArguments(ModelArguments):
    """The model; adaptation defaults to the packaged MiniLM, which it runs on offline."""

    model: str = field(default=MINILM_ALIAS, metadata=ModelArguments.__dataclass_fields__["model"].metadata)


@dataclass
class AdaptTisaArguments(TisaArguments):
    """TISA settings; adaptation defaults to `replace` mode (its purpose) and to a learning rate for the kernels
    on their own scale: amplitudes and centres are O(1) to O(10), where the weights' 1e-4 would barely move them."""

    tisa_mode: Literal["add", "replace"] = field(
        default="replace", metadata={"help": "'replace' (default here) drops position embeddings, 'add' keeps them."}
    )
    tisa_lr: float | None = field(default=1e-2, metadata={"help": "Learning rate of the TISA kernels."})


@dataclass
class AdaptTrainingArguments(TrainingArguments):
    output_dir: str = field(default="runs/adapt", metadata={"help": "Folder for the model, metrics and checkpoints."})
    learning_rate: float = field(default=1e-4, metadata={"help": "Peak learning rate of the weights (--train all)."})
    max_steps: int = field(default=1000, metadata={"help": "Optimizer steps, split across the --lengths."})
    checkpoint_steps: int = field(
        default=200, metadata={"help": "Save a resumable checkpoint every N steps (0: never)."}
    )


@dataclass
class AdaptArguments:
    objective: Literal["distill", "mlm", "embed"] = field(
        default="distill",
        metadata={
            "help": "'distill': match the unpatched model's hidden states (any encoder; beyond its table, replace "
            "mode, its states read in overlapping windows); "
            "'mlm': continued masked-LM training (needs an MLM head; replace mode may exceed the table); "
            "'embed': match the unpatched model's mean-pooled embedding, beyond its table its chunk-average."
        },
    )
    train: Literal["kernels", "all", "head"] = field(
        default="kernels",
        metadata={
            "help": "Trainable parameters: the TISA kernels, or all weights too, or (with --objective mlm) only an "
            "MLM head on the frozen model."
        },
    )
    train_text: str | None = field(
        default=None,
        metadata={
            "help": "UTF-8 text file: WikiText (' = Title = ' starts an article) or plain text, whose "
            "blank-line-separated paragraphs are its articles."
        },
    )
    lengths: list[int] = field(
        default_factory=lambda: [128],
        metadata={"help": "Block lengths in tokens, short to long; the steps are split equally between them."},
    )
    distill_layers: Literal["last", "all"] = field(
        default="last", metadata={"help": "Match the last layer's hidden states, or every layer's."}
    )
    distill_loss: Literal["cosine", "mse"] = field(
        default="cosine", metadata={"help": "Per-token distance: 1 - cosine (default) or mean squared error."}
    )
    embed_token_weight: float = field(
        default=0.0,
        metadata={
            "help": "--objective embed: weight of the token-state distillation (--distill-layers, --distill-loss) "
            "added on the blocks the teacher reads whole (0: the embedding loss alone)."
        },
    )
    embed_span_weight: float = field(
        default=0.0,
        metadata={
            "help": "--objective embed: weight of span retrieval, where a span cut from each block must find its "
            "block among the micro-batch's by cosine (in-batch negatives; 0: off). Needs 2 or more blocks a "
            "micro-batch."
        },
    )
    embed_span_tokens: int = field(
        default=32, metadata={"help": "Tokens of each span of --embed-span-weight (at most the shortest length - 2)."}
    )
    embedding_max_length: int | None = field(
        default=None,
        metadata={
            "help": "Tokens the sentence-transformers model written for a sentence-transformers base reads "
            "(max_seq_length; default: the longest --lengths). Replace mode: any length; add mode: at most the "
            "position table."
        },
    )
    multi_vector: bool = field(
        default=False,
        metadata={
            "help": "Also write OUTPUT_DIR/multi-vector once the run is saved: the adapted model as a "
            "sentence-transformers MultiVectorEncoder (one vector a token, scored by mean MaxSim, the late: "
            "read-out; documents of 32,768 tokens in replace mode). An option, as it is a second copy of the weights."
        },
    )
    mlm_probability: float = field(default=0.15, metadata={"help": "Share of tokens masked (--objective mlm)."})
    held_out_fraction: float = field(
        default=0.1, metadata={"help": "Share of the articles (the last ones, whole) held out for evaluation."}
    )
    max_eval_blocks: int = field(default=64, metadata={"help": "Held-out blocks evaluated per length (spread)."})

    def __post_init__(self) -> None:
        """Settings that cannot work are refused here, before any text or model is read."""
        if self.max_eval_blocks < 1:
            raise UsageError(
                f"--max-eval-blocks must be at least 1 (a loss over no block is 0 / 0); got {self.max_eval_blocks}."
            )
        if self.embed_token_weight < 0:
            raise UsageError(f"--embed-token-weight must be at least 0; got {self.embed_token_weight}.")
        if self.embed_span_weight < 0:
            raise UsageError(f"--embed-span-weight must be at least 0; got {self.embed_span_weight}.")
        if self.embed_span_weight and self.objective != "embed":
            raise UsageError(
                f"--embed-span-weight is a term of --objective embed, and the objective is {self.objective}; "
                "add --objective embed or leave it out."
            )
        if self.embed_span_tokens < 1:
            raise UsageError(f"--embed-span-tokens must be at least 1; got {self.embed_span_tokens}.")
        if self.embedding_max_length is not None and self.embedding_max_length < 1:
            raise UsageError(f"--embedding-max-length must be at least 1 token; got {self.embedding_max_length}.")
        if not 0 < self.mlm_probability <= 1:
            raise UsageError(f"--mlm-probability is the share of tokens masked, in (0, 1]; got {self.mlm_probability}.")


ADAPT_ARGUMENTS = (AdaptModelArguments, AdaptTisaArguments, AdaptTrainingArguments, AdaptArguments)
