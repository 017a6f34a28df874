"""cudal2 search: the LLM + RL loop that regenerates a GPU's kernel table (`python -m search`, see search/README.md).

Propose (RL policy, random, sweep order, LLM), check against the kernel catalog, compile, evaluate on the GPU,
reward, learn, store; then report, emit the table and its kernel sources, export RL data. The older fixed-set sweep
(`search.sweep`) and table selection (`search.table_select`) feed the same tables. Kernel identity lives in
`cudal2_catalog`, checking and timing in `cudal2_testing`; one-off analyses are in `studies`.
"""
