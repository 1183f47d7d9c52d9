"""The machine a run uses: device and heap (:mod:`.device`: ``resolve_device``), Dask schedulers
(:mod:`.cluster`: ``parse_scheduler``, the one ``--scheduler`` parser), disk space before heavy work
(:mod:`.diskplan`: ``check_space``) and where the time goes (:mod:`.phases`: ``PhaseTimer``)."""
