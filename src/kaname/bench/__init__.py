"""Benchmarks: commands that print figures, peers measured in the same process."""
