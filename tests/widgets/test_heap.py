"""widgets.heap.gc_paused: pauses nest and overlap across threads, and the collector comes back
as it was when the first began; MemoryView's updates run paused like PipelineView's."""

from __future__ import annotations

import gc
import threading

import explorer as ex
from widgets import MemoryView
from widgets.heap import gc_paused


def test_nested_pauses_restore_the_collector_once_the_last_ends():
    assert gc.isenabled()
    with gc_paused():
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause still holds
    assert gc.isenabled()


def test_pauses_overlapping_across_threads_end_with_the_collector_on():
    """Thread A pauses, thread B pauses, A ends first: B's work still runs paused, and the
    collector is on once both ended (a per-thread 'was it on' would have left it off)."""
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def a():
        with gc_paused():
            a_in.set()
            b_in.wait(5)
        a_out.set()

    def b():
        a_in.wait(5)
        with gc_paused():
            b_in.set()
            a_out.wait(5)
            seen["b after a ended"] = gc.isenabled()

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == {"b after a ended": False}
    assert gc.isenabled()


def test_a_pause_begun_with_the_collector_off_leaves_it_off():
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_memory_view_updates_with_the_collector_paused():
    v = MemoryView("gpt2", ex.ParallelConfig(dp=4, pp=2), global_batch=64, seq=1024)
    seen = []
    draw = v._draw
    v._draw = lambda: (seen.append(gc.isenabled()), draw())
    v.set_config(v.config.replace(zero=1))
    assert seen == [False] and gc.isenabled()
