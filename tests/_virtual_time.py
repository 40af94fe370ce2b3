"""Event loops on virtual time (looptime) for the tests that run their own: the
randomized ones, which start a fresh loop for each hypothesis example.

looptime idles ``noop_cycles`` loop cycles (42 by default) before each jump of its
clock, so that a socket or a thread it cannot see may still add work at that instant.
These tests have neither, and one that paces audio jumps every 20 ms: the idle cycles
were most of its CPU. The tests on pytest's own loops keep the default: some run real
sockets on virtual time, and the idle cycles let the bytes arrive before the clock
jumps (without them, three such tests fail).
"""

from __future__ import annotations

import asyncio

import looptime

NOOP_CYCLES = 0


def virtual_loop() -> asyncio.AbstractEventLoop:
    """A new event loop whose clock starts at 0 and jumps as soon as it is idle."""
    loop: asyncio.AbstractEventLoop = looptime.new_event_loop(start=0, noop_cycles=NOOP_CYCLES)
    return loop
