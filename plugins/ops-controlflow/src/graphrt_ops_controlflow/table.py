"""The operator table of graphrt-ops-controlflow: one line per operator.

The kernel modules are stand-ins (graphrt.lazy), imported the first time a session uses one of
their operators: a model without control flow does not pay for them.
"""

from __future__ import annotations

from graphrt.plugin import OpDef, kernel_modules

ifop, loop, optional, scan, sequence = kernel_modules(
    __package__, "ifop loop optional scan sequence"
)

OPERATORS: list[OpDef] = [
    # bodies (ifop.py, loop.py, scan.py, sequence.py)
    OpDef("If", ifop.If),
    OpDef("Loop", loop.Loop),
    OpDef("Scan", scan.Scan, since=8),
    OpDef("SequenceMap", sequence.SequenceMap, since=17),
    # sequences (sequence.py)
    OpDef("SequenceEmpty", sequence.SequenceEmpty, since=11),
    OpDef("SequenceConstruct", sequence.SequenceConstruct, since=11),
    OpDef("SequenceInsert", sequence.SequenceInsert, since=11),
    OpDef("SequenceAt", sequence.SequenceAt, since=11),
    OpDef("SequenceErase", sequence.SequenceErase, since=11),
    OpDef("SequenceLength", sequence.SequenceLength, since=11),
    OpDef("SplitToSequence", sequence.SplitToSequence, since=11),
    OpDef("ConcatFromSequence", sequence.ConcatFromSequence, since=11),
    # optionals (optional.py)
    OpDef("Optional", optional.Optional, since=15),
    OpDef("OptionalHasElement", optional.OptionalHasElement, since=15),
    OpDef("OptionalGetElement", optional.OptionalGetElement, since=15),
]
