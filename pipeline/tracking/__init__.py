"""MLflow tracking: what describes a run, the store, the records and their handlers, the tracker.

Import the module you need: this file imports nothing, because the train stage
reads and writes mlflow_run.json (run_file.py) and must not depend on the rest.
"""
