"""The control loop and its reconcilers: the scheduling pass, dispatch, status following, failover,
budgets, the sweep, submit batching. Over the ports only.
"""
