"""MLflow tracking: the run's metadata, the store, the tracker (pipeline/tracking/tracker.py for now)."""

from pipeline.tracking.tracker import *  # noqa: F403 - the names `pipeline.tracking` had as one module
from pipeline.tracking.tracker import _quick_http, _reason, _with_lock_retries  # noqa: F401
