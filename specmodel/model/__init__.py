"""The analytical model: pure functions, no I/O, no plotting."""
