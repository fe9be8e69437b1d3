"""Positional analysis of encoders: Toeplitzness of position embeddings and attention profiles (TISA paper),
identical-word probing (Wang et al. 2021), spectral view and trace vectors (Yamamoto and Matsuzaki 2023) and
latent position in the attention variance (Chi et al. 2023). `tisa-hf analyze` and `tisa-hf compare` wrap it.

The analysis functions are imported on first use (PEP 562), so that `tisa-hf analyze --help`, which reads this
package's `options` module, answers without importing torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the lazy exports below, for type checkers and the API reference
    from .html_report import write_html as write_html
    from .html_report import write_metrics as write_metrics
    from .pipeline import AnalysisOptions as AnalysisOptions
    from .pipeline import AnalysisResult as AnalysisResult
    from .pipeline import analyze_model as analyze_model
    from .pipeline import key_numbers as key_numbers
    from .plots import save_figures as save_figures

_EXPORTS = {
    "AnalysisOptions": "tisa_hf.analysis.pipeline",
    "AnalysisResult": "tisa_hf.analysis.pipeline",
    "analyze_model": "tisa_hf.analysis.pipeline",
    "key_numbers": "tisa_hf.analysis.pipeline",
    "save_figures": "tisa_hf.analysis.plots",
    "write_html": "tisa_hf.analysis.html_report",
    "write_metrics": "tisa_hf.analysis.html_report",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
