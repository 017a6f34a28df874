"""Backends of the search loop (the `search.backend.Backend` protocol): this machine's nvcc and GPUs (`local`) or a
Ray cluster (`ray_backend`, optional: needs the `ray` extra)."""
