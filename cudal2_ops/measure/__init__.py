"""Measurement shared by benchmarks/ and search/: timing modes, the results environment header, the benchmark shape
sets and the cold-L2 input-set rule. Lives below both so that neither imports the other."""
