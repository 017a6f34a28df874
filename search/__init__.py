"""cudal2 search: kernel configurations, code generation and feasibility (and, later, the LLM + RL tuning loop)."""
