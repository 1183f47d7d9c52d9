"""Helpers shared by tests in several folders, imported as ``helpers.<module>`` (tests/ is on the path):
:mod:`.common` (ROOT, no_track_config, store_snapshot), :mod:`.stand_in` (a stand-in engine and a 'sums'
benchmark), :mod:`.report_sweep` (a small finished sweep for the report tests), :mod:`.mlflow_ui` (MLflow
servers, the REST API and a headless browser for the tracking and report tests)."""
