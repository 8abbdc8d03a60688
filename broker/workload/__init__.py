"""What the broker writes into and reads from a member: the Job manifest with level-2 hints, DRA claims,
pod templates, plain-Job translation, the limits a real API server puts on them, and the job lifecycle
judged from the member.

Pure: no I/O, no clock.
"""
