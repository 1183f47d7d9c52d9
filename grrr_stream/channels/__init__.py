"""Residual-stream channels (issue 24): outlier channels from activations and their weight proxy,
channel ablation, per-channel update energies and their enrichment statistics."""
