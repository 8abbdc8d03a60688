"""Intake: how a submission comes in, below the API and the hub. The wire model of a job (job_spec,
batch_schemas, strict_wire), reading a body into a JobRequest (parse), the plain-words text of a refused
field (validation_text), the never-fit warnings a submit answer carries (submit_warnings) and the group
commit of concurrent submits (submit_batcher). POST /v1/jobs and the hub's sync both read submissions
here; the checks that need the fleet (products, clusters, dependsOn) are BrokerService.prepare_submit's,
which both then call."""
