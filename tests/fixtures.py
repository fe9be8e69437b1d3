"""What the tests build on, all tiny and generated (nothing is downloaded): random configs of every supported
architecture, saved models with a word-level tokenizer, GLUE-format tasks and WikiText-style text."""

from __future__ import annotations

import importlib.util
import os
import random
import shlex
import signal
import socket
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
import transformers
from huggingface_hub.errors import StrictDataclassFieldValidationError
from transformers import (
    AlbertConfig,
    AlbertForMaskedLM,
    AutoConfig,
    BertConfig,
    BertForMaskedLM,
    BertModel,
    BertTokenizerFast,
    DistilBertConfig,
    ElectraConfig,
    RobertaConfig,
    Trainer,
    TrainingArguments,
    XLMRobertaConfig,
)

import tisa_hf.attention as attention
from tisa_hf import supported_model_types
from tisa_hf.adapters import ADAPTERS
from tisa_hf.commands.registry import installed

# The RoPE encoders (`tiny_rope_config`), tested in tests/test_rope.py and in the contract tests that name them; every
# other supported architecture has a position table and its case in `tiny_config`.
ROPE_MODEL_TYPES = ("eurobert", "gte", "modernbert", "nomic_bert")
MODEL_TYPES = [model_type for model_type in supported_model_types() if model_type not in ROPE_MODEL_TYPES]


def rope_params(fast: tuple[str, ...] = ROPE_MODEL_TYPES) -> list:
    """`ROPE_MODEL_TYPES` as a test's parameters, those not in `fast` marked slow. An architecture the installed
    transformers lacks skips with its adapter's reason (the release that brought it), so that the tests of the others
    run on an older release."""
    params = []
    for model_type in ROPE_MODEL_TYPES:
        adapter = ADAPTERS[model_type]
        marks = [] if model_type in fast else [pytest.mark.slow]
        if not adapter.available:
            marks.append(pytest.mark.skip(reason=adapter.unavailable_reason()))
        params.append(pytest.param(model_type, marks=marks))
    return params


# The tests' encoder sizes, in this one place: `tiny_config` builds every architecture from them, and each test
# changes only what it is about (layers, positions, ...) by overrides.
TINY_SIZES = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=3,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=40,
)
TINY = dict(**TINY_SIZES, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
# A 2-layer encoder that the packaged MiniLM's tokenizer (BERT's word pieces) can feed: for saved models that are
# analysed, plotted or carded with that tokenizer.
WORD_PIECE_SIZES = dict(vocab_size=30522, num_hidden_layers=2, intermediate_size=64)
WORDS = [f"w{index}" for index in range(40)]


def requires_extra(extra: str) -> pytest.MarkDecorator:
    """A core test's mark where a part of it needs an extra: it skips, saying which, on the core install."""
    return pytest.mark.skipif(not installed(extra), reason=f'needs the {extra} extra: pip install "tisa-hf[{extra}]"')


def tiny_config(model_type: str, **overrides):
    """A tiny config of a supported architecture (`TINY`'s sizes, no dropout), with `overrides` on top."""
    if model_type == "bert":
        return BertConfig(**{**TINY, **overrides})
    if model_type == "roberta":
        return RobertaConfig(**{**TINY, "pad_token_id": 1, "max_position_embeddings": 42, **overrides})
    if model_type == "albert":
        return AlbertConfig(**{**TINY, "embedding_size": 16, "num_hidden_groups": 1, **overrides})
    if model_type == "electra":
        return ElectraConfig(**{**TINY, "embedding_size": 16, **overrides})
    if model_type == "xlm-roberta":
        return XLMRobertaConfig(**{**TINY, "pad_token_id": 1, "max_position_embeddings": 42, **overrides})
    if model_type == "distilbert":
        sizes = {key: TINY[key] for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads")}
        extra = {"hidden_dim": 37, "max_position_embeddings": 40, "dropout": 0.0, "attention_dropout": 0.0}
        return DistilBertConfig(**{**sizes, **extra, **overrides})
    raise ValueError(model_type)


# The RoPE encoders' rotary range in the tests: `replace` reads 2x and 4x past it.
ROPE_RANGE = 16


def tiny_rope_config(model_type: str, **overrides):
    """A tiny config of a RoPE encoder (`TINY_SIZES`, a rotary range of `ROPE_RANGE` positions, no dropout, token ids
    within the vocabulary), with `overrides` on top: ModernBERT with global and local layers (a window of 8 tokens,
    two rotary bases), EuroBERT with grouped key-value heads."""
    sizes = {**TINY_SIZES, "max_position_embeddings": ROPE_RANGE}
    if model_type == "modernbert":
        ids = dict(pad_token_id=0, bos_token_id=2, eos_token_id=3, cls_token_id=2, sep_token_id=3)
        extra = dict(local_attention=8, global_attn_every_n_layers=2, **ids)
    elif model_type == "eurobert":
        extra = dict(num_key_value_heads=2, pad_token_id=0, bos_token_id=2, eos_token_id=3, mask_token_id=4)
    else:
        extra = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=0)
    # By its model type: the config classes of NomicBERT, GTE and EuroBERT are missing from older transformers 5.x.
    return AutoConfig.for_model(model_type, **{**sizes, **extra, **overrides})


def modernbert_config_with_layers(layer_types: list[str]):
    """A tiny ModernBERT config whose layers are `layer_types`; skips where the installed transformers refuses them
    (releases before 5.18 refuse layer types without both kinds, global and sliding, whose two rotary bases the config
    names)."""
    try:
        config = tiny_rope_config("modernbert", num_hidden_layers=len(layer_types), layer_types=layer_types)
        type(config).from_dict(config.to_dict())  # as tisa_hf.patch rebuilds it
    except StrictDataclassFieldValidationError:
        pytest.skip(
            f"transformers {transformers.__version__}'s ModernBertConfig refuses layer types {sorted(set(layer_types))}"
            " without both kinds, which this test needs"
        )
    return config


def write_tiny_model(
    folder: Path,
    architecture: str = "bert",
    dropout: float = 0.0,
    seed: int = 0,
    masked_lm: bool = False,
    positions: int = 64,
) -> Path:
    """A random 2-layer encoder (hidden 32, `positions` table rows, weights drawn with `seed`; with an MLM head if
    `masked_lm`) and a word-level tokenizer, saved with save_pretrained."""
    torch.manual_seed(seed)
    folder.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    # transformers 5 tokenizers take the vocabulary itself (a `vocab_file` alone is ignored: every word is [UNK]).
    tokenizer = BertTokenizerFast(vocab={token: index for index, token in enumerate(vocab)}, do_lower_case=True)
    config = tiny_config(
        architecture,
        vocab_size=len(vocab),
        num_hidden_layers=2,
        intermediate_size=64,
        max_position_embeddings=positions,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
        **({"classifier_dropout_prob": dropout} if architecture == "albert" else {}),
    )
    if architecture == "albert":
        model = AlbertForMaskedLM(config)
        model = model if masked_lm else model.albert
    else:
        model = (BertForMaskedLM if masked_lm else BertModel)(config)
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
    return write_glue_tsv(folder, "rte", train_rows, dev_rows)


def stsb_rows(count: int, seed: int) -> list[tuple[str, str, str]]:
    """(sentence1, sentence2, score): the score (0-5) grows with the words sentence2 shares with sentence1."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        first = rng.sample(WORDS[:20], 5)
        shared = rng.randint(0, 4)
        second = first[:shared] + rng.sample(WORDS[20:], 4 - shared)
        rows.append((" ".join(first), " ".join(second), f"{1.25 * shared:.2f}"))
    return rows


def mrpc_rows(count: int, seed: int) -> list[tuple[str, str, str]]:
    """(sentence1, sentence2, quality): the RTE rows, a paraphrase (1) where they are an entailment."""
    return [(a, b, "1" if label == "entailment" else "0") for a, b, label in rte_rows(count, seed)]


def write_glue_tsv(folder: Path, task: str, train_rows: int = 64, dev_rows: int = 24) -> Path:
    """An RTE, MRPC or STS-B folder in the original GLUE format (each task's own header and column order)."""
    layouts = {
        "rte": ("index\tsentence1\tsentence2\tlabel", rte_rows, "{index}\t{a}\t{b}\t{label}"),
        "mrpc": ("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String", mrpc_rows, "{label}\t{index}\t{index}\t{a}\t{b}"),
        "stsb": ("index\tsentence1\tsentence2\tscore", stsb_rows, "{index}\t{a}\t{b}\t{label}"),
    }
    header, rows, line = layouts[task]
    folder.mkdir(parents=True, exist_ok=True)
    for name, count, seed in (("train.tsv", train_rows, 0), ("dev.tsv", dev_rows, 1)):
        lines = [header]
        lines += [line.format(index=i, a=a, b=b, label=label) for i, (a, b, label) in enumerate(rows(count, seed))]
        (folder / name).write_text("\n".join(lines) + "\n")
    return folder


def write_wikitext(path: Path, articles: int = 10, paragraphs: int = 3, words: int = 40, seed: int = 0) -> Path:
    """A text in WikiText's layout: ` = Title = ` articles with ` = = Section = = ` headings, `@-@` and `<unk>`."""
    rng = random.Random(seed)
    lines = []
    for _ in range(articles):
        lines += ["", f" = {rng.choice(WORDS)} {rng.choice(WORDS)} = ", ""]
        for _ in range(paragraphs):
            sentence = " ".join(rng.choice(WORDS) for _ in range(words))
            lines += [f" {sentence} , <unk> @-@ {rng.choice(WORDS)} . ", "", f" = = {rng.choice(WORDS)} = = ", ""]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def glue_argv(workspace: Path, output_dir: Path, *extra: str) -> list[str]:
    """A 12-step `tisa-hf glue` run of the tiny BERT on the generated RTE task (evaluations at steps 6 and 12)."""
    return [
        "--model", str(workspace / "bert"), "--data-dir", str(workspace), "--task", "rte",
        "--output-dir", str(output_dir), "--max-steps", "12", "--train-batch-size", "8", "--eval-batch-size", "8",
        "--learning-rate", "1e-3", "--warmup-steps", "2", "--eval-steps", "6", "--logging-steps", "3",
        "--max-seq-length", "32", "--no-tracking", *extra,
    ]  # fmt: skip


def accelerate_launch(module: str, *placement: str) -> list[str]:
    """`accelerate launch` of `module` on 2 CPU processes in all, placed by `placement` (the machine and rendezvous
    options)."""
    return [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", *placement,
        "--mixed_precision", "no", "--dynamo_backend", "no", "-m", module,
    ]  # fmt: skip


def two_process_launch(module: str) -> list[str]:
    """`accelerate launch` of `module` on 2 CPU processes, rendezvousing on a free port (so that concurrent runs on
    one machine never meet on accelerate's default port)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return accelerate_launch(module, "--num_machines", "1", "--main_process_port", str(port))


def two_machine_launch(
    module: str, argv: list[str], environment: dict[str, str], timeout: int = 300
) -> subprocess.CompletedProcess:
    """`module` run as two machines of one process each (`accelerate launch --num_machines 2`, machine ranks 0 and
    1, rendezvous on 127.0.0.1), on CPU with gloo, both inside a network namespace of their own that holds only the
    loopback interface (`unshare --net`): torchrun's rendezvous store listens on every address of its machine, and
    there no address but 127.0.0.1 exists. `environment` is added to this process's. Both are killed if they
    outlive `timeout` seconds; the exit status is nonzero if either machine failed, and stdout holds both
    machines' output."""
    rendezvous = ("--num_machines", "2", "--main_process_ip", "127.0.0.1", "--main_process_port", "29500")
    machines = [
        shlex.join([*accelerate_launch(module, *rendezvous, "--machine_rank", str(rank)), *argv]) for rank in (0, 1)
    ]
    script = (
        f"ip link set lo up && {{ {machines[0]} & first=$!; {machines[1]} & second=$!; "
        "wait $first; a=$?; wait $second; b=$?; exit $((a | b)); }"
    )
    environment = {
        **os.environ,
        **environment,
        "ACCELERATE_USE_CPU": "true",
        "OMP_NUM_THREADS": "1",
        "GLOO_SOCKET_IFNAME": "lo",
    }
    with subprocess.Popen(
        ["unshare", "--net", "sh", "-c", script],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            raise
    return subprocess.CompletedProcess(process.args, process.returncode, output, None)


def network_namespaces_available() -> bool:
    """Whether this process may make a network namespace of its own (`unshare --net`: root, or CAP_SYS_ADMIN)."""
    try:
        return subprocess.run(["unshare", "--net", "true"], capture_output=True, timeout=30).returncode == 0
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return False


class RecordingRoute:
    """`SdpaPolicy.choose`, recording the route of every call once `install`ed."""

    def __init__(self):
        self.taken: list[attention.SdpaRoute] = []
        self.decide = attention.SdpaPolicy.choose

    def choose(self, policy: attention.SdpaPolicy, call: attention.SdpaCall) -> attention.SdpaRoute:
        self.taken.append(self.decide(policy, call))
        return self.taken[-1]

    def install(self, monkeypatch) -> RecordingRoute:
        monkeypatch.setattr(attention.SdpaPolicy, "choose", lambda policy, call: self.choose(policy, call))
        return self


SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_script(name: str) -> ModuleType:
    """scripts/NAME.py imported as a module: the scripts are no package, and one may import a sibling."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPTS))
    return module


def enable_activation_checkpointing(model) -> None:
    """Activation checkpointing on, by the name the installed transformers gives it (`activation_checkpointing_enable`
    from 5.23, `gradient_checkpointing_enable` before)."""
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable()


class FirstTokenTask(torch.utils.data.Dataset):
    """Label 1 when the first token id is in the upper half of ids `low` to `vocab_size`: learnable in a few steps."""

    def __init__(self, size: int = 32, vocab_size: int = 50, low: int = 0):
        self.inputs = torch.randint(low, vocab_size, (size, 12), generator=torch.Generator().manual_seed(1))
        self.threshold = (low + vocab_size) // 2

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.inputs[index], "labels": (self.inputs[index, 0] > self.threshold).long()}


def short_trainer(model, task: FirstTokenTask, output_dir: Path, max_steps: int) -> Trainer:
    """transformers' `Trainer` for `max_steps` steps of 8 on the CPU, saving and reporting nothing (accelerate, the
    finetune extra, must be installed)."""
    arguments = TrainingArguments(
        output_dir=str(output_dir),
        max_steps=max_steps,
        per_device_train_batch_size=8,
        learning_rate=1e-2,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    return Trainer(model=model, args=arguments, train_dataset=task)
