"""The member manifest: what the broker writes into a member cluster for a job (Job translation,
pod templates, DRA claims, hints, lifecycle), and the limits a real API server puts on it."""
