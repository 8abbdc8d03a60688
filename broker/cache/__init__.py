"""The broker's in-memory views of the fleet: what the placer and the API's reads know of each cluster
(summaries, reservations, what is placeable), refreshed incrementally from the StateStore."""
