"""Residual-stream channels: outlier channels, their weight proxy, ablation and per-channel update energies."""
