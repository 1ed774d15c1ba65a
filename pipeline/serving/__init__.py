"""The trained model served: the MLflow pyfunc model and its dynamic batcher."""
