"""Intake: how a submission comes in, below the API and the hub. The wire model of a job (job_spec,
batch_schemas, strict_wire), reading a body into a JobRequest (parse) and the plain-words text of a
refused field (validation_text). POST /v1/jobs and the hub's sync both read submissions here."""
