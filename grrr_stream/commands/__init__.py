"""The subcommands of ``grrr-stream`` (entry point: :mod:`grrr_stream.cli`).

- :mod:`.parsers`: one argument parser per subcommand; :mod:`.options`: the flags several share;
- :mod:`.transition`: decompose, stats, compare, bands, variants, evaluate;
- :mod:`.sweep`: sweep (and demo), status;
- :mod:`.printing`: the tables and summaries they print.
"""
