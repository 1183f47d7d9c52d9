"""The command line ``grrr-stream`` (:func:`main`, from :mod:`.entry`; also ``python -m grrr_stream.cli``):
the parsers (:mod:`.parsers`, :mod:`.model_parsers`, shared flags in :mod:`.options`), the subcommands
(:mod:`.transition`, :mod:`.sweep`, :mod:`.channels`, :mod:`.channel_stats`) and what they print
(:mod:`.printing`)."""

# `grrr_stream.cli:main` is the console script's entry point, also in environments installed before
# the command line became a package
from .entry import main

__all__ = ["main"]
