"""Differential testing of enzcc's gradients: a generator of random differentiable C programs that check
themselves (reverse mode, forward mode and finite differences must agree), a runner that classifies what
enzcc does with them, and a shrinker that reduces a failing program (``make fuzz``, README "Fuzzing")."""
