"""Training: data parallel processes, the update step, the run state and checkpoints, the loop."""
