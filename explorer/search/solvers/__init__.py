"""The solvers of a weighted search Problem: exhaustive, ilp, dynamic (graph elimination),
recursive (recursive programming + local descent) and propagation (from annotations)."""
