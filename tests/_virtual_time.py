"""Virtual time (looptime) without idle cycles, for every test on it: the randomized
tests that start a loop of their own for each hypothesis example (``virtual_loop``), and,
through tests/conftest.py, the tests on pytest's loops (``NOOP_CYCLES``).

looptime idles ``noop_cycles`` loop cycles (42 by default) before each jump of its
clock, so that a socket or a thread it cannot see may still add work at that instant.
Our virtual-time tests do not need them: their loopback servers run in the same loop (a
write is ready at the next poll), their threads run through ``run_in_executor`` (which
looptime waits for in real time), and tests with other processes run on real time. A
test that paces audio jumps every 20 ms: the idle cycles were most of its CPU.
"""

from __future__ import annotations

import asyncio

import looptime

NOOP_CYCLES = 0


def virtual_loop() -> asyncio.AbstractEventLoop:
    """A new event loop whose clock starts at 0 and jumps as soon as it is idle."""
    loop: asyncio.AbstractEventLoop = looptime.new_event_loop(start=0, noop_cycles=NOOP_CYCLES)
    return loop
