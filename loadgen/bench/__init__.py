"""Benchmarks of loadgen itself: figures printed, never timed unit tests."""
