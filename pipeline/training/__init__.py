"""Training: the update step, the run state and checkpoints, the loop, optimizer and schedule."""
