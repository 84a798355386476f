"""The enzcc benchmark suite (see docs/benchmarks.md): ``python3 -m bench``."""
