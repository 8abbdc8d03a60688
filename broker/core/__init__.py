"""The core vocabulary every other package speaks: the model, errors, ports, quantities, the GPU catalog.

Pure: no I/O library, no clock, no adapter.
"""
