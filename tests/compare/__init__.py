"""ouro compare, best, cat and row 0: replicate statistics from real sets."""
