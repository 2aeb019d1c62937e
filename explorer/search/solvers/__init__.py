"""Solvers over a search Problem: exhaustive, ILP (HiGHS), dynamic programming, recursive
programming and sharding propagation."""
