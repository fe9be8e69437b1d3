"""`TisaConfig`: the settings of translation-invariant self-attention, stored in `config.json` as `"tisa"`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Literal

MODES = ("add", "replace")
INITS = ("fit", "zeros", "random")
FAR_FIELDS = ("none", "log")
# The named policies of `tisa_sdpa`'s routes (`attention/policy.py`): without the fused route, and with it.
SDPA_POLICIES = ("standard", "fused")
# Settings that change how the kernels are used, not what they are: a checkpoint may be loaded with other values.
READING_SETTINGS = ("length_scale_from", "sdpa_policy")


@dataclass
class TisaConfig:
    """How TISA patches an encoder.

    Args:
        num_kernels: S, the number of Gaussian kernels per head and layer (0 disables the bias; with
            `mode="replace"` that is the bag-of-words baseline).
        mode: `"add"` keeps the position embeddings; `"replace"` replaces each by their mean, so the
            scoring functions carry all positional information and inputs may exceed the position table.
        init: `"fit"` fits the kernels to the positional attention profiles of the model's own weights,
            `"zeros"` starts with f = 0, `"random"` draws them at random.
        share_across_layers: one scoring function per head, shared by every layer.
        fit_window: largest |j - i| the fit looks at (None: every offset of the profile).
        profile_length: positions used to extract the profiles (None: the whole position table, at most 512).
        fit_restarts: random starts per head, on top of the 15 peak-seeded ones.
        far_field: `"log"` adds -r·log(1 + |k|) to f with one learned slope r per head and layer (as KERPLE-log),
            so that attention keeps a sense of distance past the Gaussians' window; r starts at 0 (f unchanged)
            and is trained by fine-tuning or adaptation. `"none"`: f is the kernels alone.
        length_scale_from: L, a training length: inputs of n > L tokens have their query-key logits scaled by
            log(n) / log(L) (as YaRN's and scalable softmax's length-aware temperature), so that attention over
            thousands of keys stays as peaked as over L; n counts each sequence's unpadded tokens. None: off.
            Needs no training, so `from_pretrained(checkpoint, tisa=...)` may set it on any TISA checkpoint.
        sdpa_policy: the routes `attn_implementation="sdpa"` tries: `"standard"`, or `"fused"`, which tries TISA's
            Triton kernel pair first where it runs (CUDA; docs/performance.md). None: the process's default,
            `"fused"` where `TISA_HF_FUSED_ATTENTION=1` was set when `tisa_hf` was imported, else `"standard"`. A
            reading setting, like `length_scale_from`: any checkpoint may be loaded with either.
    """

    num_kernels: int = 5
    mode: Literal["add", "replace"] = "add"
    init: Literal["fit", "zeros", "random"] = "fit"
    share_across_layers: bool = False
    fit_window: int | None = 64
    profile_length: int | None = None
    fit_restarts: int = 16
    far_field: Literal["none", "log"] = "none"
    length_scale_from: int | None = None
    sdpa_policy: Literal["standard", "fused"] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.num_kernels, bool) or not isinstance(self.num_kernels, int) or self.num_kernels < 0:
            raise ValueError(f"TisaConfig.num_kernels must be an integer >= 0, got {self.num_kernels!r}.")
        if self.mode not in MODES:
            raise ValueError(f"TisaConfig.mode must be one of {', '.join(MODES)}; got {self.mode!r}.")
        if self.init not in INITS:
            raise ValueError(f"TisaConfig.init must be one of {', '.join(INITS)}; got {self.init!r}.")
        if not isinstance(self.share_across_layers, bool):
            raise ValueError(f"TisaConfig.share_across_layers must be True or False, got {self.share_across_layers!r}.")
        if self.far_field not in FAR_FIELDS:
            raise ValueError(f"TisaConfig.far_field must be one of {', '.join(FAR_FIELDS)}; got {self.far_field!r}.")
        if self.length_scale_from is not None and (
            isinstance(self.length_scale_from, bool)
            or not isinstance(self.length_scale_from, int)
            or self.length_scale_from < 2
        ):
            raise ValueError(
                f"TisaConfig.length_scale_from must be an integer >= 2 or None, got {self.length_scale_from!r}."
            )
        if self.sdpa_policy is not None and self.sdpa_policy not in SDPA_POLICIES:
            raise ValueError(
                f"TisaConfig.sdpa_policy must be one of {', '.join(SDPA_POLICIES)} or None; got {self.sdpa_policy!r}."
            )
        for name in ("fit_window", "profile_length"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"TisaConfig.{name} must be a positive integer or None, got {value!r}.")
        if not isinstance(self.fit_restarts, int) or self.fit_restarts < 0:
            raise ValueError(f"TisaConfig.fit_restarts must be an integer >= 0, got {self.fit_restarts!r}.")

    @classmethod
    def from_value(cls, value: TisaConfig | dict[str, Any] | bool) -> TisaConfig:
        """Accepts what users pass as `tisa=`: a `TisaConfig`, a dict of its fields, or `True` for defaults."""
        if isinstance(value, cls):
            return value
        if value is True:
            return cls()
        if isinstance(value, dict):
            known = {f.name for f in fields(cls)}
            unknown = sorted(set(value) - known)
            if unknown:
                raise ValueError(
                    f"Unknown TisaConfig field(s) {', '.join(unknown)}; the fields are {', '.join(sorted(known))}."
                )
            return cls(**value)
        raise ValueError(f"tisa= takes a tisa_hf.TisaConfig, a dict of its fields or True; got {type(value).__name__}.")

    def kernel_settings(self) -> TisaConfig:
        """These settings with the `READING_SETTINGS` at their defaults: what a checkpoint's kernels belong to."""
        return replace(self, **{name: TisaConfig.__dataclass_fields__[name].default for name in READING_SETTINGS})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def num_parameters(self, num_layers: int, num_heads: int) -> int:
        """3·S·H·L (plus H·L far-field slopes), or 3·S·H (+ H) when the functions are shared across layers."""
        layers = 1 if self.share_across_layers else num_layers
        per_function = 3 * self.num_kernels + (self.far_field != "none")
        return per_function * num_heads * layers

    @property
    def has_scoring_function(self) -> bool:
        """Whether f is not identically 0 by construction: kernels, or a far-field term."""
        return self.num_kernels > 0 or self.far_field != "none"
