"""Wait or burst: predicted waits, the burst decision, cloud spend and budgets, cloud scale-up headroom."""
