"""The fuzz suite of issue 13: generated and mutated models for every installed operator,
run in worker processes (docs/fuzzing.md)."""
