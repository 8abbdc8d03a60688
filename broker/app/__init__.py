"""Composition roots: `gpufed serve` wiring (the one place adapters meet the broker) and the demo."""
