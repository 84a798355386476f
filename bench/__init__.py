"""The enzcc benchmark suite (see README.md, "Benchmarks"): ``python3 -m bench``."""
