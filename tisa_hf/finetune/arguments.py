"""Fine-tuning settings: dataclasses parsed by `transformers.HfArgumentParser` from a YAML config plus CLI overrides.

Precedence: dataclass defaults < YAML file (`--config`) < command line. YAML keys are the field names; a nested
section (`tisa: {num_kernels: 5}`) stands for its prefixed fields (`tisa_num_kernels`), and on the command line
`--tisa.num_kernels 5`, `--tisa_num_kernels 5` and `--tisa-num-kernels 5` are the same option.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import os
import types
from argparse import ArgumentTypeError
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NoReturn, Union, get_args, get_origin, get_type_hints

import yaml
from transformers import HfArgumentParser
from transformers.hf_argparser import string_to_bool

from ..config import TisaConfig
from ..errors import UsageError, usage_errors

NESTED_SECTIONS = ("tisa",)


def require_at_least(option: str, value: float, minimum: float) -> None:
    """A UsageError unless `value` is a finite number >= `minimum` (YAML's .nan and .inf are numbers too)."""
    if not (math.isfinite(value) and value >= minimum):
        raise UsageError(f"{option} must be at least {minimum:g}; got {value}.")


@dataclass
class ModelArguments:
    model: str = field(
        default="albert-base-v2",
        metadata={
            "help": "Hub id or local folder of a checkpoint of an encoder TISA supports "
            "(tisa_hf.supported_model_types()); 'minilm' is the packaged all-MiniLM-L6-v2."
        },
    )
    tokenizer: str | None = field(default=None, metadata={"help": "Tokenizer id or folder (default: the model's)."})
    config_overrides: str | None = field(
        default=None,
        metadata={
            "help": "Settings of the model's config to change before it loads, as in transformers' examples: "
            "'attention_probs_dropout_prob=0,hidden_dropout_prob=0.2' (keys the config has; saved with the model)."
        },
    )

    def __post_init__(self) -> None:
        self.config_override_items()

    def config_override_items(self) -> dict[str, str]:
        """--config-overrides as {key: value as written}; a UsageError unless it is `key=value,...`."""
        if self.config_overrides is None:
            return {}
        items = [item.partition("=") for item in self.config_overrides.split(",")]
        malformed = [key + sep + value for key, sep, value in items if not (sep and key.strip() and value.strip())]
        if malformed:
            raise UsageError(
                f"--config-overrides takes key=value pairs separated by commas "
                f"('attention_probs_dropout_prob=0,hidden_dropout_prob=0.2'); got {malformed[0]!r}."
            )
        return {key.strip(): value.strip() for key, _, value in items}


def _config_field_help() -> dict[str, str]:
    """Each TisaConfig field's help, from the `Args:` section of its docstring (the one place it is written)."""
    helps: dict[str, str] = {}
    name = None
    for line in TisaConfig.__doc__.split("Args:", 1)[1].splitlines():
        stripped = line.strip()
        head, colon, rest = stripped.partition(": ")
        if colon and head.isidentifier() and head in {f.name for f in dataclasses.fields(TisaConfig)}:
            name, helps[head] = head, rest
        elif name and stripped:
            helps[name] += " " + stripped
    return helps


def _tisa_arguments() -> type:
    """`--tisa.<field>` for every TisaConfig field (defaults as in TisaConfig, except that leaving
    `--tisa.num_kernels` unset means no TISA), plus `--tisa.lr`, the kernels' own learning rate."""
    types = get_type_hints(TisaConfig)
    helps = _config_field_help()
    specs = []
    for config_field in dataclasses.fields(TisaConfig):
        annotation, default = types[config_field.name], config_field.default
        if config_field.name == "num_kernels":
            annotation, default = int | None, None
            helps["num_kernels"] += " Unset: no TISA (the baseline)."
        specs.append(
            (
                f"tisa_{config_field.name}",
                annotation,
                field(default=default, metadata={"help": helps[config_field.name]}),
            )
        )
    specs.append(
        (
            "tisa_lr",
            float | None,
            field(default=None, metadata={"help": "Learning rate of the TISA kernels (default: --learning_rate)."}),
        )
    )

    def tisa_config(self) -> TisaConfig | None:
        """The TisaConfig these options ask for, or None for the baseline."""
        if self.tisa_num_kernels is None:
            return None
        with usage_errors():
            return TisaConfig(**{f.name: getattr(self, f"tisa_{f.name}") for f in dataclasses.fields(TisaConfig)})

    def __post_init__(self) -> None:
        if self.tisa_lr is not None:
            require_at_least("--tisa.lr", self.tisa_lr, 0.0)

    return dataclasses.make_dataclass(
        "TisaArguments",
        specs,
        namespace={"tisa_config": tisa_config, "__post_init__": __post_init__, "__module__": __name__},
    )


TisaArguments = _tisa_arguments()


@dataclass
class TrainingArguments:
    output_dir: str = field(default="runs/latest", metadata={"help": "Folder for the model, metrics and checkpoints."})
    seed: int = field(default=1, metadata={"help": "Seed of the head's initialisation, shuffling and dropout."})
    learning_rate: float = field(default=2e-5, metadata={"help": "Peak learning rate of AdamW."})
    train_batch_size: int = field(
        default=32, metadata={"help": "Examples per optimizer step, over all processes and accumulation steps."}
    )
    eval_batch_size: int = field(default=64, metadata={"help": "Examples per evaluation batch, over all processes."})
    gradient_accumulation_steps: int = field(default=1, metadata={"help": "Micro-batches per optimizer step."})
    num_train_epochs: float = field(
        default=3.0,
        metadata={"help": "Passes over the training data, rounded up to whole optimizer steps (unless --max_steps)."},
    )
    max_steps: int | None = field(
        default=None, metadata={"help": "Optimizer steps; overrides --num_train_epochs when given."}
    )
    warmup_steps: int = field(
        default=0, metadata={"help": "Steps of linear warm-up, then linear decay to 0; overrides --warmup_ratio."}
    )
    warmup_ratio: float = field(
        default=0.0, metadata={"help": "Warm-up as a fraction of the optimizer steps (used when --warmup_steps is 0)."}
    )
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay (not on biases and norms)."})
    adam_epsilon: float = field(default=1e-6, metadata={"help": "AdamW epsilon."})
    max_grad_norm: float = field(default=1.0, metadata={"help": "Gradient clipping norm (0: off)."})
    eval_steps: int = field(default=0, metadata={"help": "Evaluate every N steps (0: only at the end)."})
    load_best_model_at_end: bool = field(
        default=False,
        metadata={
            "help": "Keep the model of the best evaluation (the task's main metric, needs --eval_steps) as the "
            "run's model instead of the last one."
        },
    )
    checkpoint_steps: int = field(default=0, metadata={"help": "Save a resumable checkpoint every N steps (0: never)."})
    logging_steps: int = field(default=50, metadata={"help": "Log the training loss every N steps."})
    resume: bool = field(
        default=False,
        metadata={"help": "Continue from the latest checkpoint in output_dir, with the settings it was started with."},
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Train from scratch into an output_dir that holds a finished run or checkpoints."},
    )
    resume_without_rng_state: bool = field(
        default=False,
        metadata={
            "help": "With --resume: continue even if the checkpoint's random-number state cannot be read (the "
            "result then differs from an uninterrupted run)."
        },
    )
    mixed_precision: Literal["no", "fp16", "bf16"] = field(default="no", metadata={"help": "Autocast precision."})
    torch_compile: bool = field(
        default=False,
        metadata={
            "help": "Compile the model with torch.compile (Accelerate's dynamo plugin), as transformers' Trainer "
            "does with --torch_compile; `accelerate launch --dynamo_backend BACKEND` does the same."
        },
    )
    torch_compile_backend: Literal["inductor", "aot_eager", "eager", "cudagraphs"] = field(
        default="inductor", metadata={"help": "The torch.compile backend with --torch-compile."}
    )
    torch_compile_mode: Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"] | None = (
        field(default=None, metadata={"help": "The torch.compile mode with --torch-compile (None: the backend's own)."})
    )
    report_to: str = field(default="tensorboard", metadata={"help": "Accelerate tracker(s), comma separated."})
    no_tracking: bool = field(default=False, metadata={"help": "Log to no tracker."})
    push_to_hub: str | None = field(default=None, metadata={"help": "Hub repo id to upload the final model to."})

    def __post_init__(self) -> None:
        """Settings that cannot work are refused here, before any data or model is loaded."""
        if self.max_steps is not None and self.max_steps <= 0:
            raise UsageError(f"max_steps must be positive (or unset, to use num_train_epochs); got {self.max_steps}.")
        if self.max_steps is None and not (math.isfinite(self.num_train_epochs) and self.num_train_epochs > 0):
            raise UsageError(f"num_train_epochs must be positive; got {self.num_train_epochs}.")
        if self.warmup_steps < 0 or not 0.0 <= self.warmup_ratio <= 1.0:
            raise UsageError(
                f"warmup_steps must be >= 0 and warmup_ratio in [0, 1]; got {self.warmup_steps} and "
                f"{self.warmup_ratio}."
            )
        for option in ("train_batch_size", "eval_batch_size", "gradient_accumulation_steps"):
            require_at_least(f"--{option.replace('_', '-')}", getattr(self, option), 1)
        for option in ("eval_steps", "logging_steps", "checkpoint_steps", "learning_rate", "weight_decay"):
            require_at_least(f"--{option.replace('_', '-')}", getattr(self, option), 0)
        require_at_least("--max-grad-norm", self.max_grad_norm, 0)
        if not (math.isfinite(self.adam_epsilon) and self.adam_epsilon > 0):
            raise UsageError(f"--adam-epsilon must be a positive number; got {self.adam_epsilon}.")
        if not 0 <= self.seed < 2**32:
            raise UsageError(f"--seed must be in [0, 2**32); got {self.seed}.")
        if self.load_best_model_at_end and self.eval_steps <= 0:
            raise UsageError(
                "load_best_model_at_end needs eval_steps > 0: with a single evaluation at the end the best model is "
                "the last one."
            )

    def unresolved_step_settings(self) -> set[str]:
        """The step counts these settings leave to be resolved from the data (`max_steps` from the epochs,
        `warmup_steps` from the ratio): a finished run's record holds resolved values that they cannot match."""
        unresolved = set()
        if self.max_steps is None:
            unresolved.add("max_steps")
        if self.warmup_steps == 0:
            unresolved.add("warmup_steps")
        return unresolved


def flatten_config(values: dict[str, Any]) -> dict[str, Any]:
    """YAML mapping -> field names: nested sections become prefixed fields (`tisa.lr` -> `tisa_lr`)."""
    flat = {}
    for key, value in values.items():
        if key in NESTED_SECTIONS and isinstance(value, dict):
            flat.update({f"{key}_{inner}": inner_value for inner, inner_value in value.items()})
        else:
            flat[key.replace("-", "_").replace(".", "_")] = value
    return flat


def load_config_file(path: str | os.PathLike) -> dict[str, Any]:
    try:
        values = yaml.safe_load(Path(path).read_text()) or {}
    except FileNotFoundError as error:
        raise UsageError(f"Config file {path} does not exist.") from error
    except yaml.YAMLError as error:
        raise UsageError(f"Config file {path} is not valid YAML: {error}") from error
    if not isinstance(values, dict):
        raise UsageError(f"Config file {path} must hold a mapping of settings, not {type(values).__name__}.")
    return flatten_config(values)


_NOT_CONVERTIBLE = object()


def _as_type(value: Any, annotation: Any) -> Any:
    """`value` as one type of a field, as the command line converts it (strings through the type, so that YAML's
    `1e-05`, a string to YAML, is a float as `--learning-rate 1e-05` is), or `_NOT_CONVERTIBLE`."""
    if get_origin(annotation) is Literal:
        return value if isinstance(value, str) and value in get_args(annotation) else _NOT_CONVERTIBLE
    if get_origin(annotation) is list:
        if not isinstance(value, list):
            return _NOT_CONVERTIBLE
        items = [_as_type(item, get_args(annotation)[0]) for item in value]
        return _NOT_CONVERTIBLE if _NOT_CONVERTIBLE in items else items
    if annotation is bool:
        try:
            return string_to_bool(value) if isinstance(value, (bool, str)) else _NOT_CONVERTIBLE
        except ArgumentTypeError:
            return _NOT_CONVERTIBLE
    if annotation in (int, float) and isinstance(value, bool):
        return _NOT_CONVERTIBLE
    if annotation is float and isinstance(value, int) or isinstance(value, str) and annotation in (int, float):
        try:
            return annotation(value)
        except ValueError:
            return _NOT_CONVERTIBLE
    return value if isinstance(value, annotation) else _NOT_CONVERTIBLE


def _type_name(annotation: Any) -> str:
    if get_origin(annotation) is Literal:
        return "one of " + ", ".join(map(str, get_args(annotation)))
    if get_origin(annotation) is list:
        return f"a list, each item {_type_name(get_args(annotation)[0])}"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(
        annotation, str(annotation)
    )


def typed_config_values(values: dict[str, Any], dataclass_types: tuple[type, ...], path: str) -> dict[str, Any]:
    """The YAML `values` as their fields' types, or a UsageError naming the key, the file, the value and the
    type. argparse converts (and checks) only what the command line gives; a YAML value would reach the run as
    YAML typed it (`max_seq_length: 32.7`, `mixed_precision: fp8`) without this check."""
    hints = {name: hint for dtype in dataclass_types for name, hint in get_type_hints(dtype).items()}
    typed = {}
    for key, value in values.items():
        annotation = hints[key]
        options = get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else (annotation,)
        if value is None and type(None) in options:
            typed[key] = None
            continue
        for option in options:
            converted = _as_type(value, option) if option is not type(None) else _NOT_CONVERTIBLE
            if converted is not _NOT_CONVERTIBLE:
                typed[key] = converted
                break
        else:
            expected = " or ".join(_type_name(option) for option in options if option is not type(None))
            if type(None) in options:
                expected += " (or null)"
            raise UsageError(f"Config file {path}: {key} must be {expected}; got {value!r}.")
    return typed


def _dotted_aliases(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """`--tisa.num_kernels` (and `--tisa.num-kernels`) -> `--tisa_num_kernels`, keeping `=value` parts; and each
    renamed option's spelling as typed (`--tisa_num_kernels` -> `--tisa.num_kernels`), for the errors."""
    out, typed = [], {}
    for arg in argv:
        for section in NESTED_SECTIONS:
            if arg.startswith(f"--{section}."):
                name, sep, value = arg.partition("=")
                renamed = "--" + name[2:].replace(".", "_").replace("-", "_")
                typed[renamed] = name
                arg = renamed + sep + value
        out.append(arg)
    return out, typed


def _as_typed(message: str, parser: argparse.ArgumentParser, typed: dict[str, str]) -> str:
    """argparse names an option by all its spellings (`argument --tisa_num_kernels/--tisa-num-kernels: ...`); one
    the user typed dotted is named as typed."""
    for action in parser._actions:
        spelled = [typed[name] for name in action.option_strings if name in typed]
        if spelled:
            message = message.replace(f"argument {'/'.join(action.option_strings)}:", f"argument {spelled[0]}:")
    return message


def parse_arguments(
    dataclass_types: tuple[type, ...],
    argv: list[str],
    prog: str,
    refuse: Callable[[argparse.ArgumentParser, str], NoReturn] | None = None,
) -> tuple[Any, ...]:
    """Parses `--config FILE` plus overrides into instances of `dataclass_types`; unknown keys and options are
    errors. `refuse(parser, message)` replaces argparse's reporting of a command line it cannot parse (by default
    the usage, then the message, then exit status 2)."""
    pre = argparse.ArgumentParser(prog=prog, add_help=False)
    pre.add_argument("--config")
    parser = HfArgumentParser(
        dataclass_types,
        prog=prog,
        description="Settings come from --config FILE (YAML) and the options below, which override it; "
        "every option takes dashes or underscores, and the TISA ones also the --tisa.num_kernels spelling.",
    )
    parser.add_argument("--config", help="YAML file of settings; command-line options override it.")
    argv, typed = _dotted_aliases(argv)
    report = refuse or argparse.ArgumentParser.error
    if refuse is not None:
        pre.error = functools.partial(refuse, parser)
    parser.error = lambda message: report(parser, _as_typed(message, parser, typed))
    known, rest = pre.parse_known_args(argv)
    if known.config:
        values = load_config_file(known.config)
        fields = {f.name for dtype in dataclass_types for f in dataclasses.fields(dtype)}
        unknown = sorted(set(values) - fields)
        if unknown:
            raise UsageError(
                f"Config file {known.config} has unknown setting(s) {', '.join(unknown)}; "
                f"the settings are {', '.join(sorted(fields))}."
            )
        parser.set_defaults(**typed_config_values(values, dataclass_types, known.config))
    *parsed, unknown = parser.parse_args_into_dataclasses(
        args=rest, return_remaining_strings=True, look_for_args_file=False
    )
    if unknown:
        as_typed = [typed.get(name, name) + sep + value for name, sep, value in (arg.partition("=") for arg in unknown)]
        parser.error(f"unrecognized arguments: {' '.join(as_typed)}")
    return tuple(parsed[: len(dataclass_types)])


def default_config(*instances: Any) -> dict[str, Any]:
    """The default of every setting of the parsed dataclasses (those with one), in `resolved_config`'s layout."""
    defaults: dict[str, Any] = {}
    for instance in instances:
        for setting in dataclasses.fields(instance):
            if setting.default is not dataclasses.MISSING:
                defaults[setting.name] = setting.default
            elif setting.default_factory is not dataclasses.MISSING:
                defaults[setting.name] = setting.default_factory()
    return defaults


def resolved_config(*instances: Any) -> dict[str, Any]:
    """All settings of the parsed dataclasses in one flat mapping (what `run_config.yaml` stores)."""
    merged: dict[str, Any] = {}
    for instance in instances:
        merged.update(dataclasses.asdict(instance))
    return merged
