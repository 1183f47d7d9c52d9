"""``python -m grrr_stream.cli``: the same as ``grrr-stream``."""

import sys

from .entry import main

sys.exit(main())
