"""The per-matrix math, pure torch and no I/O: frame, projection and split (:mod:`.frame`), the analyses
beyond the paper (:mod:`.analyses`), the metrics (:mod:`.metrics`), per-channel energies
(:mod:`.channel_energy`), and :func:`.kernel.decompose_matrix`, which runs them on one matrix pair."""
