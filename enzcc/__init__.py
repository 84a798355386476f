"""enzcc: a compiler driver that synthesizes gradients (Enzyme-style AD) on optimized LLVM IR."""

__version__ = "0.1.0"
