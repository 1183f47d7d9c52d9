"""The Zarr v3 store of one transition: ``TransitionStore`` (write) and ``StoredTransition`` (read) in
:mod:`.transition_store`, arrays and codecs (:mod:`.zarr_arrays`), the per-matrix tables
(:mod:`.metric_tables`) and per-channel ones (:mod:`.channel_tables`), the shared frame cache
(:mod:`.frame_cache`) and the xarray view (:mod:`.xarray_view`: ``open_store``, ``read_metrics``)."""
