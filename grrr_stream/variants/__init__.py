"""Variants of a stored transition (W0 + chosen parts): the spec (:mod:`.spec`), the rest source (:mod:`.rest`),
the composer (:mod:`.compose`), channel-restricted updates (:mod:`.channels`), fidelity (:mod:`.fidelity`), what
of each component survives 16-bit rounding (:mod:`.survival`) and the builder (:mod:`.builder`:
``VariantBuilder``, ``write_variant``); :func:`.run.run_variants`, behind ``grrr-stream variants``."""
