"""What a fine-tuning or adaptation run checks before it loads data or a model: what its output folder allows
(resume, overwrite), where the model and tokenizer come from, and the upload target, so that a refused run
answers at once."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import AutoConfig

from ..common.hub_access import ModelSource, check_push_target, loading_errors, model_remedy, model_source
from ..common.saved_files import check_checkpoint, check_output_folder
from ..errors import UsageError
from .arguments import ModelArguments, TrainingArguments, default_config, resolved_config
from .run_folder import RunFolder


@dataclass(frozen=True)
class RunPlan:
    """What the checks found: the checkpoint to resume from, where the model and tokenizer are, the settings'
    defaults (a resumed run's saved settings that lack a newer setting count as its default) and the model config
    settings that --config-overrides changes, typed as the config has them."""

    resume_from: Path | None
    model: ModelSource
    tokenizer: ModelSource
    setting_defaults: dict[str, Any] = field(default_factory=dict)
    config_overrides: dict[str, Any] = field(default_factory=dict)


def model_sources(model_args: ModelArguments) -> tuple[ModelSource, ModelSource]:
    """Where the model and the tokenizer load from (`model_source`); raises UsageError."""
    model = model_source(model_args.model, needs_tokenizer=model_args.tokenizer is None)
    return model, model if model_args.tokenizer is None else model_source(
        model_args.tokenizer, "--tokenizer", needs_config=False
    )


def checked_config_overrides(model_args: ModelArguments, model: ModelSource) -> dict[str, Any]:
    """--config-overrides as the values the model's config takes (typed by transformers' `update_from_string`,
    as its examples' --config_overrides are), from the config alone: a key the config lacks, or a value of the
    wrong type, is a UsageError before any weights load."""
    items = model_args.config_override_items()
    if not items:
        return {}
    with loading_errors(f"the model {model.path}", model_remedy()):
        config = AutoConfig.from_pretrained(model.path, local_files_only=model.local_files_only)
    settings = config.to_dict()
    for key, value in items.items():
        if key not in settings:
            raise UsageError(
                f"--config-overrides: {type(config).__name__} ({model.path}) has no setting {key!r}; its settings "
                f"are in {model.path}'s config.json."
            )
        try:
            config.update_from_string(f"{key}={value}")
        except (ValueError, TypeError) as error:
            raise UsageError(
                f"--config-overrides: {key}={value} does not fit the type of {key} (now {getattr(config, key)!r})."
            ) from error
    return {key: getattr(config, key) for key in items}


def plan_run(*settings: Any) -> RunPlan:
    """Checks the parsed settings of one run (the dataclass instances of its command); raises UsageError."""
    model_args = next(value for value in settings if isinstance(value, ModelArguments))
    args = next(value for value in settings if isinstance(value, TrainingArguments))
    folder = RunFolder(args.output_dir)
    defaults = default_config(*settings)
    resume_from = folder.check(resolved_config(*settings), args.resume, args.overwrite_output_dir, defaults)
    check_output_folder(args.output_dir, "--output-dir")
    if resume_from is not None:
        check_checkpoint(resume_from)  # before half a minute of loading, a truncated file fails there
    model, tokenizer = model_sources(model_args)
    config_overrides = checked_config_overrides(model_args, model)
    if args.push_to_hub:
        try:
            check_push_target(args.push_to_hub)
        except ValueError as error:
            raise UsageError(
                f"--push-to-hub: {error} Or train without --push-to-hub and upload later with "
                f"`tisa-hf push {args.output_dir} {args.push_to_hub}`."
            ) from error
    return RunPlan(resume_from, model, tokenizer, defaults, config_overrides)
