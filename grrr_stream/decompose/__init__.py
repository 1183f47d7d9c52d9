"""One transition, base → post, into a store: :func:`.run.run_transition` plans it (:mod:`.plan`: pairs the
tensors, refuses bad input), streams it matrix by matrix (:mod:`.streaming`: reader → math → writer threads)
or spreads batches of matrices over Dask workers (:mod:`.spread`)."""
