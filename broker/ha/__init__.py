"""High availability: leader election (the lease), draining on shutdown, rebuilding after a Redis loss."""
