"""fork() while other threads grow a Spec's cos/sin table or run pool calls (DataLoader workers, multiprocessing):
the child must not inherit a held lock; and replaced table blocks are freed (memory stays at the table's size)."""
import os
import sys
import threading
import time

import numpy as np
import pytest

import rotary

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def _child_finishes(work, seconds=120):
    """Runs work() in a forked child; returns (finished, exit status). A child blocked on a lock held by a
    parent thread (absent in the child) never finishes: it is killed after `seconds`."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # child
        code = 1
        try:
            code = 0 if work() else 3
        finally:
            os._exit(code)
    deadline = time.time() + seconds
    while time.time() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return True, status
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return False, None


def test_child_grows_a_table_whose_growth_was_in_progress_in_the_parent():
    spec = rotary.Spec(128)
    S = 100_000  # a prefill that grows the table by 100k rows of 64 angles: long enough for fork to land inside
    x = np.ones((1, S, 1, 128), np.float32)
    started = threading.Event()

    def grow():
        started.set()
        rotary.apply(x, 0, spec, threads=1)  # GIL released while the table grows

    t = threading.Thread(target=grow, daemon=True)
    t.start()
    started.wait()
    time.sleep(0.02)
    in_growth = t.is_alive() and spec.table_positions < S

    def child():
        y = np.ones((1, 4096, 8, 128), np.float32)
        rotary.apply(y, 0, spec, threads=1)
        rotary.apply(y, 200_000, spec, threads=2)  # grows again, and uses the thread pool
        return bool(np.isfinite(y).all()) and spec.table_positions >= 4096

    finished, status = _child_finishes(child)
    t.join()
    assert finished, "the forked child is blocked (a lock held by a parent thread at fork time)"
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    assert in_growth, "fork did not land inside the growth: the scenario was not exercised"


def _resident_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
def test_replaced_table_blocks_are_freed():
    # rotary_dim 32: 128 bytes a row; 2^20 rows = 128 MiB. Keeping every replaced block (as before) cost ~2x.
    spec = rotary.Spec(32)
    before = _resident_bytes()
    for k in range(9, 21):
        rotary.apply(np.ones((1, 1, 1, 32), np.float32), 2**k - 1, spec, threads=1)  # decode-like: may use the table
        x = np.ones((1, 2**k, 1, 32), np.float32)
        rotary.apply(x, 0, spec, threads=1)  # a prefill: grows the table to 2^k rows
        del x
    assert spec.table_positions >= 2**20
    grown = _resident_bytes() - before
    table = 2**20 * 128
    assert grown < table * 1.3, f"resident growth {grown >> 20} MiB for a {table >> 20} MiB table"
