"""Cluster health: the state machine with hysteresis and causes, and failover (which jobs move, fences).

Pure: no I/O, no clock.
"""
