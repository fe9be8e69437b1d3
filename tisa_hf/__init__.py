"""tisa-hf: translation-invariant self-attention for pretrained Hugging Face encoders.

Importing the package lets `from_pretrained(..., tisa=TisaConfig(...))` patch BERT, RoBERTa and ALBERT
models, and TISA checkpoints load with their kernels.
"""

from .adapters import register_adapter, supported_model_types
from .config import TisaConfig
from .counting import PositionalParameterCount, count_positional_parameters
from .fitting import KernelFit, fit_kernels
from .integration import install
from .kernels import TisaPositionBias
from .patching import patch, tisa_config_of
from .profiles import PositionalProfiles, extract_positional_profiles, tisa_disabled
from .toeplitz import ToeplitzFit, toeplitz_fit

install()

__version__ = "0.1.0"

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
    "patch",
    "register_adapter",
    "supported_model_types",
    "tisa_config_of",
    "tisa_disabled",
    "toeplitz_fit",
]
