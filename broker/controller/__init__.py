"""The controller: the leader's control loop and its reconcilers, over work queues and one state writer.

work_queue     dirty job ids and the wake signal (informer events, job changes, timers)
job_records    the leader's in-memory job records (non-terminal), rebuilt from the store on takeover,
               kept current by the change stream
state_writer   the one place a job's state is written (fenced compare-and-set + event + cache)
change_feed    a thread that wakes the loop when another replica writes a job (submit, cancel)
scheduling, preempting, dispatching, status_sync, clusters, sweeping, budgets: the reconcilers,
               one step of the loop each (docs/architecture.md: the control loop)
service        BrokerService, the facade the API calls (submit, get, cancel)
control_loop, dispatch, faults: the loop's cadence, the create threads, crash points for the tests
"""
