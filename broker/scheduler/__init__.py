"""Level 1: the placement framework (filters, scores, plugins), the batch placer, fleet preemption.

Pure: no I/O, no clock.
"""
