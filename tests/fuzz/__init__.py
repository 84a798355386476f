"""Fuzzers for enzcc (run as modules: ``python3 -m tests.fuzz.badinput``)."""
