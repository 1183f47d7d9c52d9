"""MLflow, its one owner: the client (:mod:`.mlflow_client`: experiments, runs found again by key, artifacts),
the UI's view and addresses (:mod:`.mlflow_view`), every kind of run (:mod:`.runs`; the decomposition, variant and
evaluation runs in :mod:`.model_runs`), and a run's logging as data, delivered now or later (:mod:`.run_log`).
The server itself is started by the repository's tracking/serve.sh."""
