"""Safetensors checkpoints, the one owner of that format and of tensor names: reading (:mod:`.reader`:
``Checkpoint``, ``resolve_source``), header checks (:mod:`.header`), writing (:mod:`.writer`:
``write_checkpoint``) and the model families (:mod:`.arch`: ``FAMILIES``, ``select_matrices``)."""
