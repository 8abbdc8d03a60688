"""A job's trace without an exporter (broker.telemetry.root_traceparent): every submit still gets a W3C
traceparent of its own (its trace id is in the job's answer, the audit trail and the log lines of every
later step), drawn as the SDK would draw it, though no span is built; a later step's job_span builds none
either and still puts the job's trace id on its log lines. In a subprocess: a test before
this one in the same worker may have attached an in-memory exporter, which stays for the process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PROBE = textwrap.dedent(
    """
    import logging, re
    from broker import telemetry

    assert not telemetry.exporting()
    parents = [telemetry.root_traceparent("gpufed.job.submit", **{"gpufed.job_id": str(i)}) for i in range(100)]
    assert all(re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-01", p) for p in parents), parents[:3]
    ids = {telemetry.trace_id_of(p) for p in parents}
    assert len(ids) == 100 and "0" * 32 not in ids
    line = logging.LogRecord("gpufed", logging.INFO, "dispatching.py", 1, "dispatched", None, None)
    with telemetry.job_span("gpufed.job.dispatch", parents[0]):  # a later step: its log lines carry the trace
        telemetry.TraceIdLogFilter().filter(line)
    assert line.trace_id == telemetry.trace_id_of(parents[0]), line.trace_id
    print("ok")
    """
)


def test_each_submit_gets_a_trace_of_its_own_without_an_exporter() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], check=False, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
