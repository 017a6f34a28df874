"""Measurement shared by benchmarks/ and search/: timing modes, the results environment header, the benchmark shape
sets, the cold-L2 input-set rule and summary statistics. Lives below both so that neither imports the other."""
