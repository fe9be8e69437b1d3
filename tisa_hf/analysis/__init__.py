"""Positional analysis of encoders: Toeplitzness of position embeddings and attention profiles (TISA paper),
identical-word probing (Wang et al. 2021), spectral view and trace vectors (Yamamoto and Matsuzaki 2023) and
latent position in the attention variance (Chi et al. 2023). `tisa-hf analyze` and `tisa-hf compare` wrap it."""

from .html_report import write_html, write_metrics
from .pipeline import AnalysisOptions, AnalysisResult, analyze_model, key_numbers
from .plots import save_figures

__all__ = [
    "AnalysisOptions",
    "AnalysisResult",
    "analyze_model",
    "key_numbers",
    "save_figures",
    "write_html",
    "write_metrics",
]
