"""The channels pass's defaults, in a module that imports nothing: the command line's ``channels`` parser shows
them in ``--help`` without importing torch (~1 s of its start) through :mod:`.activations` or :mod:`.calibration`."""

DEFAULT_MAX_MEMORY = "1GiB"  # resident weights; the rest is offloaded to disk layer by layer
DEFAULT_SEQUENCES = 256  # calibration sequences
DEFAULT_SEQ_LEN = 256  # tokens each
