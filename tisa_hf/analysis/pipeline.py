"""One analysis of one encoder: runs every step (with a progress bar) and gathers the numbers."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..common.machine import versions
from ..errors import UsageError
from .embeddings import (
    VARIANCE_LEVELS,
    AmplitudeSpectrum,
    GramToeplitzness,
    amplitude_spectrum,
    dimensions_for_variance,
    gram_toeplitzness,
    pca_cumulative_variance,
    position_table,
)
from .encoder_loading import model_facts
from .indicators import LOCAL_OFFSETS
from .positional_attention import ProfileAnalysis, analyze_profiles
from .probing import DEFAULT_TEXTS, ProbingResult, head_directions, probe_identical_words, trace_vectors
from .scoring import ScoringComparison, compare_scoring_to_fitted_profiles
from .variance import VarianceProfile, attention_output_variance


@dataclass
class AnalysisOptions:
    """Settings of `analyze_model`; `max_len` bounds every sequence the analyses use."""

    max_len: int = 512
    layers: list[int] | None = None
    texts: list[str] = field(default_factory=lambda: list(DEFAULT_TEXTS))
    word: str = "the"
    exclude_special: bool = True
    local_offsets: int = LOCAL_OFFSETS
    trace_offsets: int = 10
    variance_batch: int = 16
    seed: int = 0
    progress: bool = True


@dataclass
class AnalysisResult:
    """Everything one analysis computed; `metrics` is the JSON-ready summary."""

    facts: dict
    options: AnalysisOptions
    gram: GramToeplitzness
    profiles: ProfileAnalysis
    scoring: ScoringComparison | None
    probing: ProbingResult
    spectrum: AmplitudeSpectrum
    cumulative_variance: np.ndarray
    traces: torch.Tensor
    variance: VarianceProfile
    metrics: dict


def analysis_length(model: PreTrainedModel, max_len: int) -> int:
    """Positions to analyse: `max_len`, checked against the position table."""
    if max_len < 4:
        raise UsageError(f"--max-len must be at least 4, got {max_len}.")
    available = position_table(model).shape[0]
    if max_len > available:
        raise UsageError(
            f"--max-len {max_len} exceeds the position table of this model ({available} positions); "
            f"use --max-len {available} or less."
        )
    return max_len


def analyze_model(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    model_id: str,
    options: AnalysisOptions | None = None,
) -> AnalysisResult:
    """All six analyses of one encoder (base or head model, patched or not)."""
    options = options or AnalysisOptions()
    length = analysis_length(model, options.max_len)
    model.eval()
    steps = tqdm(total=6, desc="analyze", unit="step", disable=None if options.progress else True)  # None: TTY only

    def step(name: str) -> None:
        steps.set_postfix_str(name)

    step("position embeddings")
    table = position_table(model, length)
    gram = gram_toeplitzness(table)
    spectrum = amplitude_spectrum(table)
    cumulative = pca_cumulative_variance(table)
    steps.update()
    step("positional attention profiles")
    profiles = analyze_profiles(model, length, options.layers)
    steps.update()
    step("scoring functions")
    scoring = compare_scoring_to_fitted_profiles(model, profiles)  # whatever max_len is
    steps.update()
    step("identical-word probing")
    probing = probe_identical_words(
        model, tokenizer, length, options.word, options.exclude_special, options.local_offsets
    )
    steps.update()
    step("trace vectors")
    traces = trace_vectors(model, tokenizer, options.texts, length, options.trace_offsets)[profiles.layers]
    steps.update()
    step("attention-output variance")
    variance = attention_output_variance(model, length, options.variance_batch, options.seed)
    steps.update()
    steps.close()

    facts = model_facts(model, model_id)
    metrics = {
        "model": facts,
        "versions": versions(),
        "options": {key: value for key, value in asdict(options).items() if key != "progress"},
        "embeddings_toeplitz": {
            "length": length,
            "r2": gram.r2,
            "prefix_length": gram.prefix_length,
            "prefix_r2": gram.prefix_r2,
        },
        "positional_profiles": {
            "length": length,
            "layers": profiles.layers,
            "query_positions": profiles.query_positions,
            "r2": profiles.r2.tolist(),
            "r2_mean": profiles.r2.mean().item(),
        },
        "scoring_functions": None
        if scoring is None
        else {
            "num_kernels": scoring.num_kernels,
            "layers": scoring.layers,
            "window": int(scoring.offsets[-1]),
            "profile_length": scoring.profile_length,
            "r2": scoring.r2.tolist(),
            "r2_mean": scoring.r2.mean().item(),
        },
        "probing": {
            "word": probing.word,
            "length": length,
            "exclude_special": probing.exclude_special,
            "local_offsets": options.local_offsets,
            **{name: getattr(probing, name).tolist() for name in ("aiv", "opr", "opr_local", "sd", "db")},
            "mean": {name: getattr(probing, name).mean().item() for name in ("aiv", "opr", "opr_local", "sd", "db")},
        },
        "spectral": {
            "frequencies": spectrum.frequencies.tolist(),
            "amplitude_mean": spectrum.mean.tolist(),
            "amplitude_quartiles": spectrum.quantiles().tolist(),
            "peak_frequency_median": spectrum.peak_frequencies.median().item(),
            "pca_cumulative_variance": cumulative.tolist(),
            "pca_dimensions_for": {str(level): dimensions_for_variance(cumulative, level) for level in VARIANCE_LEVELS},
        },
        "trace_vectors": {
            "layers": profiles.layers,
            "offsets": list(range(-options.trace_offsets, options.trace_offsets + 1)),
            "num_texts": len(options.texts),
            "traces": traces.tolist(),
            "head_direction": head_directions(traces),
        },
        "latent_position_variance": {
            "batch_size": options.variance_batch,
            "bidirectional": variance.bidirectional.tolist(),
            "causal": variance.causal.tolist(),
            "bidirectional_log_log_slope": variance.bidirectional_slope,
            "causal_log_log_slope": variance.causal_slope,
        },
    }
    return AnalysisResult(
        facts=facts,
        options=options,
        gram=gram,
        profiles=profiles,
        scoring=scoring,
        probing=probing,
        spectrum=spectrum,
        cumulative_variance=cumulative,
        traces=traces,
        variance=variance,
        metrics=metrics,
    )


def key_numbers(metrics: dict) -> dict[str, float | None]:
    """The numbers `tisa-hf compare` sets side by side (the TISA paper's figure 2)."""
    mean = metrics["probing"]["mean"]
    return {
        "P_toeplitz_r2": metrics["embeddings_toeplitz"]["r2"],
        "profile_r2_mean": metrics["positional_profiles"]["r2_mean"],
        "AIV": mean["aiv"],
        "OPR": mean["opr"],
        "OPR_local": mean["opr_local"],
        "SD": mean["sd"],
        "DB": mean["db"],
    }
