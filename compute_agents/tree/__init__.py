"""The serving tree across processes: the L1 router's view of its executors (``registry``: heartbeats,
power of two choices, a circuit breaker per executor)."""
