"""Matplotlib figures, written as PNG files (Agg backend, no display needed), by family:

- :mod:`.decomposition`: one transition's energy fractions, spectra, band energies and heatmaps, and the sweep's bars
  per transition; :mod:`.comparisons`: the cosines against the isotropic null and the updates' norms;
  :mod:`.accuracy`: the evaluations' scores; :mod:`.channels`: the outlier channels' shares per layer;
- :mod:`.labels`: what figures and the report say in words (model names, p-values, a cosine's reading);
- :mod:`.canvas`: what every figure shares (the backend, resolution, page width, saving).

Callers use the names below through this package (``plots.cosine_medians``), so a test can replace one there.
"""

from .accuracy import accuracy_bars
from .canvas import DPI, PAGE_INCHES
from .channels import SFT_RL_COLORS, SFT_RL_MAPS, channel_layer_shares
from .comparisons import cosine_medians, norm_bars
from .decomposition import (
    BAND_PARTS,
    HEATMAP_KEYS,
    band_energy_by_module,
    band_energy_by_transition,
    energy_fractions_by_layer,
    grouped_fractions,
    layer_module_heatmaps,
    normalized_spectra,
)
from .labels import cosine_label, model_label, p_text

__all__ = [
    "BAND_PARTS",
    "DPI",
    "HEATMAP_KEYS",
    "PAGE_INCHES",
    "SFT_RL_COLORS",
    "SFT_RL_MAPS",
    "accuracy_bars",
    "band_energy_by_module",
    "band_energy_by_transition",
    "channel_layer_shares",
    "cosine_label",
    "cosine_medians",
    "energy_fractions_by_layer",
    "grouped_fractions",
    "layer_module_heatmaps",
    "model_label",
    "norm_bars",
    "normalized_spectra",
    "p_text",
]
