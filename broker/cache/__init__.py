"""The placer's cache: the FleetCache (observed summaries less live reservations) and the pure deduction
of a reservation from a summary (Kueue's cache -> snapshot -> assume).
"""
