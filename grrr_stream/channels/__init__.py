"""Residual-stream channels: one model's outlier channels from its activations (:mod:`.activations`, the
offloaded RMS pass on the shipped :mod:`.calibration` text; :mod:`.rule`, :mod:`.proxy`, :mod:`.ablation`;
:func:`.analysis.run_channels`), and a transition's stored per-channel energies against a channel set
(:mod:`.enrichment`, :mod:`.layers`). The energies themselves: geometry/channel_energy, store/channel_tables."""
