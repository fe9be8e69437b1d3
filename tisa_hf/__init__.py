"""tisa-hf: translation-invariant self-attention for pretrained Hugging Face encoders.

Importing the package registers TISA's model types (`tisa_hf_bert`, ...) and attention functions (`tisa_sdpa`,
...) with transformers, so that `from_pretrained(..., tisa=TisaConfig(...))` converts a BERT, RoBERTa, ALBERT,
ELECTRA, XLM-RoBERTa, DistilBERT, ModernBERT, NomicBERT, GTE or EuroBERT checkpoint and TISA checkpoints load with
their kernels.
"""

from .adapters import supported_model_types
from .attaching import tisa_config_of
from .config import TisaConfig
from .counting import PositionalParameterCount, count_positional_parameters
from .fitting import KernelFit, fit_kernels
from .integration import install
from .kernels import TisaPositionBias
from .model_configs import tisa_model_config
from .modeling import register_adapter
from .packaged import minilm_path, resolve_model
from .patching import patch
from .profiles import PositionalProfiles, extract_positional_profiles, tisa_disabled
from .toeplitz import ToeplitzFit, toeplitz_fit

install()

__version__ = "0.2.0"

__all__ = [
    "KernelFit",
    "PositionalParameterCount",
    "PositionalProfiles",
    "TisaConfig",
    "TisaPositionBias",
    "ToeplitzFit",
    "count_positional_parameters",
    "extract_positional_profiles",
    "fit_kernels",
    "minilm_path",
    "patch",
    "register_adapter",
    "resolve_model",
    "supported_model_types",
    "tisa_config_of",
    "tisa_disabled",
    "tisa_model_config",
    "toeplitz_fit",
]
