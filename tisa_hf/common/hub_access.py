"""The Hugging Face Hub seen from tisa-hf: where models and datasets come from, checked before anything is loaded;
whether an upload can work; one clear message when the Hub cannot be reached.

Without a network, transformers and datasets retry for half a minute and end in chained tracebacks; a short
probe of the Hub's endpoint answers the same question in at most `PROBE_TIMEOUT_S`. Light on purpose (no torch):
the command line checks its inputs before it imports the libraries that load anything.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import huggingface_hub
from huggingface_hub import constants, errors
from huggingface_hub.utils import get_session, validate_repo_id
from safetensors import SafetensorError

from ..errors import UsageError
from ..packaged import MINILM_ALIAS, resolve_model
from .saved_files import CONFIG_FILE, TOKENIZER_FILES, check_model_folder, has_tokenizer

PROBE_TIMEOUT_S = 3.0
# What failed loads raise: OSError (transformers' "couldn't connect", a missing file, huggingface_hub's
# OfflineModeIsEnabled and HTTP status errors) and the HTTP client's transport errors.
LOADING_ERRORS = (OSError, errors.HTTPError)


@dataclass(frozen=True)
class ModelSource:
    """What `from_pretrained` is given: a path or Hub id, and whether only the local cache may be read (the Hub
    is out of reach, but the cache holds the model)."""

    path: str
    local_files_only: bool = False


def hub_reachable(timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether the Hub's endpoint answers within `timeout` seconds (False in offline mode)."""
    if huggingface_hub.is_offline_mode():
        return False
    try:
        get_session().head(constants.ENDPOINT, timeout=timeout)
    except LOADING_ERRORS:
        return False
    return True


def is_connection_error(error: BaseException) -> bool:
    """A failure to reach the Hub (no network, DNS, timeout, offline mode), as opposed to an answer from it."""
    if isinstance(error, errors.OfflineModeIsEnabled):
        return True
    if isinstance(error, errors.HfHubHTTPError):
        return False
    # transformers reports a failed download as a plain OSError that says so.
    return isinstance(error, errors.HTTPError | ConnectionError | TimeoutError) or "couldn't connect" in str(error)


def describe_error(error: BaseException) -> str:
    """One line saying why a load or upload failed."""
    first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if not is_connection_error(error):
        return first_line
    if huggingface_hub.is_offline_mode():
        return f"HF_HUB_OFFLINE is set and the local cache does not hold it ({first_line})"
    return f"the Hugging Face Hub is unreachable ({first_line})"


def _offline_reason() -> str:
    return "HF_HUB_OFFLINE is set" if huggingface_hub.is_offline_mode() else "the Hugging Face Hub is unreachable"


def model_remedy(option: str = "--model") -> str:
    """The way out of a model that cannot be loaded, for the command-line `option` naming it."""
    packaged = f"{option} {MINILM_ALIAS}" if option.startswith("--") else MINILM_ALIAS
    return f"use {packaged} (the packaged all-MiniLM-L6-v2) or a local model folder"


def model_source(
    name: str, option: str = "--model", needs_config: bool = True, needs_tokenizer: bool = False
) -> ModelSource:
    """Checks that `name` (`minilm`, a local folder or a Hub id) can be loaded, without loading it.

    A Hub id is fine when the Hub answers, or when the local cache holds it (then it is read from the cache only,
    skipping transformers' retries); a local folder must hold a config.json unless `needs_config` is False (a
    tokenizer's folder), a tokenizer when `needs_tokenizer` (the command reads text with the model's own: a model
    saved alone by `save_pretrained` has none, and transformers then fails only after loading, in a traceback),
    and its config.json and weights are checked (`check_model_folder`). Anything else is a UsageError naming the
    problem and the way out.
    """
    try:
        path = resolve_model(name)
    except ImportError as error:
        raise UsageError(f"{option} {name}: {error}") from error
    remedy = model_remedy(option)
    if os.path.isdir(path):
        if needs_config and not os.path.isfile(os.path.join(path, CONFIG_FILE)):
            raise UsageError(
                f"{option} {name} is a folder without {CONFIG_FILE}, so not a saved model (save_pretrained writes "
                f"one); {remedy}."
            )
        if needs_tokenizer and not has_tokenizer(path):
            raise UsageError(
                f"{option} {name} is a model folder without a tokenizer (none of {', '.join(TOKENIZER_FILES)}), as "
                f"save_pretrained writes a model alone; save the tokenizer it was trained with into it "
                f"(tokenizer.save_pretrained({name!r})), or {remedy}."
            )
        check_model_folder(path)
        return ModelSource(path)
    if os.path.exists(path):
        raise UsageError(f"{option} {name} is a file; it takes a model folder or a Hub id: {remedy}.")
    try:
        validate_repo_id(path)
    except errors.HFValidationError as error:
        raise UsageError(f"{option} {name}: no such folder, and not a Hub model id either; {remedy}.") from error
    if hub_reachable():
        return ModelSource(path)
    if isinstance(huggingface_hub.try_to_load_from_cache(path, "config.json"), str):
        return ModelSource(path, local_files_only=True)
    raise UsageError(
        f"{option} {name} is not a local folder and not in the local Hub cache, and {_offline_reason()}, so it "
        f"cannot be downloaded; {remedy}."
    )


def check_hub_dataset(name: str, remedy: str) -> None:
    """Before `datasets.load_dataset(name)`: a UsageError naming `remedy` when the Hub cannot be reached. In
    offline mode the datasets cache is used, and `loading_errors` reports a dataset it does not hold."""
    if not huggingface_hub.is_offline_mode() and not hub_reachable():
        raise UsageError(
            f"The dataset {name} comes from the Hugging Face Hub, which is unreachable; {remedy} (or set "
            "HF_HUB_OFFLINE=1 to use a copy in the local datasets cache)."
        )


# Where the WikiText-style text of the commands comes from when no file is given: WikiText-2 (raw) on the Hub.
WIKITEXT_HUB = ("Salesforce/wikitext", "wikitext-2-raw-v1")
WIKITEXT_HELP = f"default: WikiText-2's %s split from the Hub, {WIKITEXT_HUB[0]} {WIKITEXT_HUB[1]}"


def wikitext_file(split: str, option: str) -> Path:
    """WikiText-2's `split` from the Hub as the text file that `option` otherwise names (one line a row, blank
    lines kept, ` = Title = ` lines starting articles), written once into the datasets cache; one line, before any
    model loads, when the Hub or the cache cannot give it."""
    import datasets  # here: the commands that read WikiText bring it

    name, config = WIKITEXT_HUB
    path = Path(datasets.config.HF_DATASETS_CACHE) / "tisa_hf" / f"{config}-{split}.txt"
    if path.is_file():
        return path
    remedy = f"pass {option} with a local copy of WikiText-2 (docs/long-documents.md#the-data says how to get one)"
    check_hub_dataset(name, remedy)
    with loading_errors(f"{name} ({config}, {split})", remedy):
        rows = datasets.load_dataset(name, config, split=split)["text"]
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text("".join(row or "\n" for row in rows), encoding="utf-8")
    partial.replace(path)
    return path


@contextmanager
def loading_errors(what: str, remedy: str) -> Iterator[None]:
    """Turns what a failed `from_pretrained` or `load_dataset` raises into one UsageError line; a damaged weights
    file (one in the Hub cache: a local folder's are checked by `model_source`) says so."""
    try:
        yield
    except SafetensorError as error:
        raise UsageError(
            f"Could not load {what}: a weights file is damaged or incomplete ({describe_error(error)}); "
            f"re-download or re-save the model, or {remedy}."
        ) from error
    except LOADING_ERRORS as error:
        raise UsageError(f"Could not load {what}: {describe_error(error)}; {remedy}.") from error


def check_push_target(repo_id: str) -> None:
    """Raises UsageError when an upload to `repo_id` cannot work: a malformed id, offline mode, or no token."""
    try:
        validate_repo_id(repo_id)
    except errors.HFValidationError as error:
        raise UsageError(f"{repo_id!r} is not a Hub repository id ({error}); use e.g. user/bert-tisa-rte.") from error
    if huggingface_hub.is_offline_mode():
        raise UsageError(f"HF_HUB_OFFLINE is set, so nothing can be uploaded to {repo_id}; unset it.")
    if huggingface_hub.get_token() is None:
        raise UsageError(f"Uploading to {repo_id} needs a Hugging Face token: run `hf auth login` or set HF_TOKEN.")
