"""Count every allocation of numpy array data, transient ones included: the counter the core
ships for plugin authors (graphrt.testing's steady-state check), one implementation for both."""

from graphrt.testing._alloc import count_numpy_allocations

__all__ = ["count_numpy_allocations"]
