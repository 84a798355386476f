"""``make bench-parallel``: the heat equation with OpenMP threads and with MPI ranks (docs/benchmarks.md,
"Threads and ranks")."""
