"""The forecast of a sweep before it runs: the work model (:mod:`.work`), what the models weigh (:mod:`.shapes`)
and this machine's rates (:mod:`.calibrate`); :mod:`grrr_stream.sweep.forecast` applies them to a plan."""
