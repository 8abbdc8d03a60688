"""A broker of 1,000 members holds more than 1,024 descriptors (a TLS connection per member API server):
the pipes it waits on (an API process's ready byte, the reaper's broker-gone pipe) may then be numbered
above 1,024, where select() raises "filedescriptor out of range" (found at 1,000 members: `gpufed serve`
died starting its API process)."""

from __future__ import annotations

import os
import resource
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from adapters import reaper
from broker.app import api_workers

HIGH = 1500


@dataclass
class HighPipe:
    read_end: int  # HIGH
    write_end: int
    write_open: bool = True

    def close_write(self) -> None:
        os.close(self.write_end)
        self.write_open = False


@pytest.fixture
def pipe_above_1024() -> Iterator[HighPipe]:
    """A pipe whose read end is descriptor HIGH (the soft limit raised to allow it when it is lower)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft <= HIGH:
        if hard != resource.RLIM_INFINITY and hard <= HIGH:
            pytest.skip(f"descriptors are limited to {hard} here")
        resource.setrlimit(resource.RLIMIT_NOFILE, (HIGH + 1, hard))
    read_end, write_end = os.pipe()
    pipe = HighPipe(os.dup2(read_end, HIGH), write_end)
    os.close(read_end)
    try:
        yield pipe
    finally:
        os.close(pipe.read_end)
        if pipe.write_open:
            os.close(pipe.write_end)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_an_api_process_ready_byte_is_read_above_descriptor_1024(pipe_above_1024: HighPipe) -> None:
    os.write(pipe_above_1024.write_end, b"1")
    assert api_workers._read_ready(pipe_above_1024.read_end, 5.0)


def test_an_api_process_that_exits_before_ready_is_seen_above_descriptor_1024(
    pipe_above_1024: HighPipe,
) -> None:
    pipe_above_1024.close_write()
    assert not api_workers._read_ready(pipe_above_1024.read_end, 5.0)


def test_the_reaper_sees_the_broker_gone_above_descriptor_1024(pipe_above_1024: HighPipe) -> None:
    broker = subprocess.Popen(["sleep", "60"])  # a stand-in broker with no children to reap
    try:
        pipe_above_1024.close_write()  # the broker's end closed: watch() returns once it reads end-of-file
        reaper.watch(broker.pid, pipe_above_1024.read_end, os.urandom(16).hex())
    finally:
        broker.kill()
        broker.wait()
