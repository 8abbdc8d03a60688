"""The broker's in-memory views of the fleet: the FleetCache (observed summaries less live reservations,
refreshed incrementally from the StateStore), the pure deduction of a reservation from a summary (Kueue's
cache -> snapshot -> assume), and the snapshot published for the API's read views.
"""
