"""Differential testing of enzcc: a generator of random differentiable C programs that check themselves
(reverse mode, forward mode and finite differences must agree), a runner that classifies what enzcc does
with them, and a shrinker that reduces a failing program (``make fuzz``); and a bad-input fuzzer that feeds
mutated C and LLVM IR to enzcc (``badinput``: never a traceback, an LLVM abort or a half-written output)."""
