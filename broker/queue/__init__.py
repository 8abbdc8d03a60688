"""The global queue: priority, fair share across tenants (DRF), age; fleet-wide quotas with borrowing.

Pure: no I/O, no clock.
"""
