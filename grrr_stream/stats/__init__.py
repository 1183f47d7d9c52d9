"""Statistics over finished stores: summaries with bootstrap CIs (:mod:`.summaries`), two transitions compared
(:mod:`.comparisons`), paired claims over evaluation results (:mod:`.claims`, :mod:`.claims_sets`); :mod:`.run`:
``run_stats``, ``run_bands``, ``run_comparisons``, behind ``grrr-stream stats``, ``bands`` and ``compare``."""
