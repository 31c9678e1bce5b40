"""graphrt-ops-controlflow: If, Loop, Scan, SequenceMap, sequences and optionals."""

__version__ = "0.1.0"
