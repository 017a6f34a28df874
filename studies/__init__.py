"""One-off analyses of measurements (sweeps, search stores, simulated runs), each a `python -m studies.<name>` command
that writes the Markdown or JSON a results file or a document cites: the proposers at several evaluation budgets
(`budget_study`), PDL on/off ratios (`pdl_effect`), candidate kernels against the built ones (`candidate_report`),
the winners' patterns by problem size (`findings`), the simulated GPU against real kernels
(`simulator_calibration`), a table's losses against its tuned times (`table_drift`) and what a new table changed
(`table_change`). They sit above search/ and benchmarks/; nothing imports them.
"""
