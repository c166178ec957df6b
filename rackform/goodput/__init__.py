"""Goodput: the share of the GPU-hours paid for that became training, by simulation
(`simulate`) of a training plan's cluster (`scenario`) with heal's own decisions in the loop."""
