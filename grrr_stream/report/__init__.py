"""The sweep's HTML report (WORKDIR/report/index.html): the one owner of that page's format.

- :mod:`.tables`: the paper's tables and the others (the kinds' own, through one generic section);
  :mod:`.cells`: their cells, each naming its CSV source, and the shapes tables take (grouped SFT / RL, split when
  wide, transposed); :mod:`.channels`: the residual-channel tables;
- :mod:`.figures`: the figures, drawn by :mod:`grrr_stream.plots`, embedded as data: URIs;
- :mod:`.build`: the page (Jinja2 templates in ``templates/``), provenance included.
"""

from .build import CONFIG_FILE, PAGE, write_html

__all__ = ["CONFIG_FILE", "PAGE", "write_html"]
