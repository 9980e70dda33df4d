# SPDX-License-Identifier: MIT
"""GIL ordering seen two ways (docs/interfaces.md "Python and the GIL").

test-targets/py_gil_order.py: one thread takes ext_lock_c with the GIL
released and comes back to Python holding it (ext_lock_c -> GIL); later
another takes ext_lock_c while holding the GIL (GIL -> ext_lock_c).

- With GOT patching (the default), the extension's PyEval_RestoreThread is
  hooked and the ext_lock_c -> GIL edge is made there, before the GIL wait.
- With HEISEN_GOT_PATCH=0 no entry point is hooked; the edge comes only from
  the release of a lock taken without the GIL while the GIL is held — the
  fallback for GIL takes heisen cannot see (inside the interpreter).
"""
import os
import struct
import subprocess

import pytest

from conftest import edge_pairs, fact_int, findings_of, pyext_dir, target


@pytest.mark.parametrize("got", ["1", "0"])
def test_lock_kept_across_a_gil_retake_closes_a_cycle_with_the_gil(heisen, session, got):
    ext = pyext_dir(heisen)
    p = heisen.preload(["/usr/bin/python3", ext / "py_gil_order.py"], session,
                       env={"HEISEN_GOT_PATCH": got, "HEISEN_PYEXT": str(ext)})
    assert p.returncode == 0, p.stderr
    assert "done ok" in p.stdout
    report = heisen.dump_json(session, expect_rc=1)
    [proc] = report["processes"]
    assert proc["python"]["got_patched"] is (got == "1")
    [f] = findings_of(report, "potential-deadlock")
    assert edge_pairs(f) == {("ext_lock_c", "GIL"), ("GIL", "ext_lock_c")}
    by_from = {e["from"]["name"]: e for e in f["edges"]}
    assert by_from["ext_lock_c"]["tid"] == fact_int(p.stdout, "tid_keeper")
    assert by_from["GIL"]["tid"] == fact_int(p.stdout, "tid_grabber")
    # where ext_lock_c was taken (without the GIL): the extension's native frame
    held_at = [fr["function"] for fr in by_from["ext_lock_c"]["from_stack"]["frames"]]
    assert "ext_take_c" in held_at
    # the GIL -> ext_lock_c acquisition, with the Python caller's frame
    taken = by_from["GIL"]["to_stack"]["frames"]
    assert "py_take_c_with_gil" in [fr["function"] for fr in taken]
    assert any(fr["python"] and fr["function"] == "grabber" for fr in taken)


KEPT_PAST_RETURN = """\
import os, sys, threading
sys.path.insert(0, os.environ["HEISEN_PYEXT"])
import heisenlocks


def take():
    heisenlocks.take_c_nogil()  # marker: take c


def take_via():
    take()  # marker: call take


def keeper():
    take_via()  # marker: call take_via
    heisenlocks.release_c()


def grabber():
    heisenlocks.take_c_with_gil()


for fn in (keeper, grabber):
    t = threading.Thread(target=fn)
    t.start()
    t.join()
print("done ok", flush=True)
"""


@pytest.mark.parametrize("got", ["1", "0"])
def test_lock_kept_past_the_return_of_its_python_callers_keeps_their_lines(heisen, session, tmp_path, got):
    """ext_lock_c is taken with the GIL released two Python calls down
    (keeper -> take_via -> take) and still held after both returned; the
    ext_lock_c -> GIL edge is made then (at the GIL retake inside the take
    with GOT patching, at the release without).  Its from-stack is where the
    lock was taken, whole: the native frames, then take, take_via and
    keeper at the lines that made the calls, then the thread's machinery --
    a stack read lazily at the acquisition is completed before the thread
    takes the GIL back, while those frames are still there."""
    ext = pyext_dir(heisen)
    script = tmp_path / "kept_past_return.py"
    script.write_text(KEPT_PAST_RETURN)
    p = heisen.preload(["/usr/bin/python3", script], session,
                       env={"HEISEN_GOT_PATCH": got, "HEISEN_PYEXT": str(ext)})
    assert p.returncode == 0 and "done ok" in p.stdout, p.stderr
    report = heisen.dump_json(session, expect_rc=1)
    [f] = findings_of(report, "potential-deadlock")
    assert edge_pairs(f) == {("ext_lock_c", "GIL"), ("GIL", "ext_lock_c")}
    (held,) = [e for e in f["edges"] if e["from"]["name"] == "ext_lock_c"]
    st = held["from_stack"]
    assert not st.get("truncated"), st
    names = [fr.get("function") for fr in st["frames"]]
    assert names[0] == "ext_take_c", names
    pys = [(fr["function"], fr["line"]) for fr in st["frames"] if fr.get("python")]
    assert pys[:3] == [("take", marker_line(script, "take c")),
                       ("take_via", marker_line(script, "call take")),
                       ("keeper", marker_line(script, "call take_via"))], pys
    assert [n for n, _ in pys[3:6]] == ["Thread.run", "Thread._bootstrap_inner", "Thread._bootstrap"], pys


def test_without_the_reverse_order_there_is_no_gil_finding(heisen, session):
    """The keeper alone (lock kept across a GIL retake) is an order, not a cycle."""
    ext = pyext_dir(heisen)
    code = ("import sys; sys.path.insert(0, %r); import heisenlocks, threading\n"
            "t = threading.Thread(target=lambda: (heisenlocks.take_c_nogil(), heisenlocks.release_c()))\n"
            "t.start(); t.join(); print('ok')\n" % str(ext))
    for got in ("1", "0"):
        p = heisen.preload(["/usr/bin/python3", "-c", code], session / got, env={"HEISEN_GOT_PATCH": got})
        assert p.returncode == 0 and p.stdout == "ok\n", p.stderr
        report = heisen.dump_json(session / got, expect_rc=0)
        assert report["findings"] == []


# ---- a GIL cycle needs two threads that can hold its locks -------------------

from conftest import SYSTEM_PYTHON, marker_line  # noqa: E402


def sqlite_callbacks(heisen, session, mode):
    p = heisen.preload([SYSTEM_PYTHON, heisen.src_targets / "py_sqlite_callbacks.py", mode], session,
                       timeout=120)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    assert "done" in p.stdout.split()
    return p, heisen.dump_json(session)


@pytest.mark.parametrize("mode", ["single", "perthread"])
def test_sqlite3_callbacks_on_unshared_connections_are_quiet(heisen, session, mode):
    """create_function, set_trace_callback and set_progress_handler (GIL ->
    db mutex) and the callbacks they install (db mutex -> GIL) on connections
    no other thread uses: one thread's two orders, no deadlock, no finding."""
    p, report = sqlite_callbacks(heisen, session, mode)
    assert report["findings"] == [], report["findings"]


def test_sqlite3_connection_shared_by_two_threads_is_predicted(heisen, session):
    """check_same_thread=False, two threads on one connection at the same
    time with nothing ordering their uses (no Python lock between them): one
    ran a query whose user function needs the GIL while the db mutex is
    held, the connection's db mutex is also taken with the GIL held.  Not a
    hand-over: predicted from a run that did not hang, once, through the GIL
    once, with two different threads and both stacks, Python lines in."""
    p, report = sqlite_callbacks(heisen, session, "shared")
    pid, tid_udf = fact_int(p.stdout, "pid"), fact_int(p.stdout, "tid_udf")
    src = heisen.src_targets / "py_sqlite_callbacks.py"
    pds = findings_of(report, "potential-deadlock")
    assert len(pds) == 1, report["findings"]
    f = pds[0]
    assert f["pid"] == pid and len(f["edges"]) == 2
    kinds = [e["from"]["kind"] for e in f["edges"]]
    assert sorted(kinds) == ["gil", "mutex"], kinds
    tids = [e["tid"] for e in f["edges"]]
    assert tids[0] != tids[1] and tid_udf in tids, tids
    (to_gil,) = [e for e in f["edges"] if e["to"]["kind"] == "gil"]
    (to_db,) = [e for e in f["edges"] if e["to"]["kind"] == "mutex"]
    assert to_gil["tid"] == tid_udf

    def python_lines(stack):
        return [(fr["function"], fr.get("line")) for fr in stack["frames"] if fr.get("python")]

    # db mutex -> GIL: the user function's query, held and taking the GIL, in "udf"
    udf_line = ("main.<locals>.udf", marker_line(src, "udf query"))
    assert udf_line in python_lines(to_gil["from_stack"]), to_gil["from_stack"]
    assert udf_line in python_lines(to_gil["to_stack"]), to_gil["to_stack"]
    assert "sqlite3_step" in [fr.get("function") for fr in to_gil["to_stack"]["frames"]]
    # GIL -> db mutex: create_function with the GIL held
    creates = {("main", marker_line(src, "main create_function")),
               ("main.<locals>.gil", marker_line(src, "gil create_function"))}
    assert creates & set(python_lines(to_db["to_stack"])), to_db["to_stack"]
    assert "sqlite3_create_function_v2" in [fr.get("function") for fr in to_db["to_stack"]["frames"]]


def test_sqlalchemy_queuepool_handing_connections_between_threads_is_quiet(heisen, session, tmp_path):
    """SQLAlchemy's QueuePool over a sqlite file hands each connection from
    thread to thread under its queue's lock, never to two at once; each
    connection has a user function (created with the GIL held: GIL -> db
    mutex) run inside sqlite3_step and, in some requests, a trace callback
    (db mutex -> GIL), the two orders by different threads.  Hand-overs, not
    sharing: no finding (on a rule of "two threads used it", 1 to 4 false
    potential deadlocks per run)."""
    pytest.importorskip("sqlalchemy")
    p = heisen.preload([SYSTEM_PYTHON, heisen.src_targets / "py_sqlalchemy_pool.py", tmp_path / "pool.db", "4", "40"],
                       session, timeout=180)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    assert "done" in p.stdout.split()
    # the connections did pass from thread to thread, many times
    assert fact_int(p.stdout, "connections") == 3, p.stdout
    assert fact_int(p.stdout, "handovers") >= 20, p.stdout
    report = heisen.dump_json(session, expect_rc=0)
    assert report["findings"] == [], report["findings"]


# ---- the hand-over records of short-lived objects ----------------------------

CHURN_BETWEEN = """\
import os, sys, threading
sys.path.insert(0, os.environ["HEISEN_PYEXT"])
import ctypes
import heisenlocks

n = int(sys.argv[1])
ready, done = threading.Event(), threading.Event()
keep = ctypes.CDLL(None).malloc
keep.restype = ctypes.c_void_p


def keeper():
    heisenlocks.take_c_nogil()
    heisenlocks.release_c()
    for _ in range(n):  # short-lived locks, each released once: a record each while it lives
        lock = threading.Lock()
        lock.acquire()
        lock.release()
        keep(32)  # a block kept: the heap moves on, and the next lock is at a new address
    ready.set()  # released after ext_lock_c: the grabber acquires it, a hand-over
    done.wait()  # the keeper goes on (not outlived)


def grabber():
    ready.wait()
    heisenlocks.take_c_with_gil()
    done.set()


threads = [threading.Thread(target=keeper), threading.Thread(target=grabber)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("done ok", flush=True)
"""


def test_hand_over_is_kept_across_many_short_lived_locks(heisen, session, tmp_path):
    """ext_lock_c -> GIL in the keeper, GIL -> ext_lock_c in the grabber, the
    lock handed from one to the other through an Event; between the two the
    keeper makes, takes and drops 20,000 Python locks (a waiter lock per
    blocking wait, in a service), each at a new address (a block kept
    after each: a heap that moves on).  ext_lock_c's record is its own
    while it lives, whatever comes and goes around it: a hand-over, no
    finding.  (Records placed by the address's hash were overwritten by the
    short-lived locks' releases: the lock counted as shared, a false
    potential deadlock in each of 6 runs.)"""
    ext = pyext_dir(heisen)
    script = tmp_path / "churn_between.py"
    script.write_text(CHURN_BETWEEN)
    p = heisen.preload(["/usr/bin/python3", script, "20000"], session, env={"HEISEN_PYEXT": str(ext)},
                       timeout=180)
    assert p.returncode == 0 and "done ok" in p.stdout, p.stderr
    report = heisen.dump_json(session, expect_rc=0)
    assert report["findings"] == [], report["findings"]


SHORT_LIVED_LOCKS = """\
import sys, threading
for _ in range(int(sys.argv[1])):
    lock = threading.Lock()
    lock.acquire()
    lock.release()
print("ready", flush=True)
sys.stdin.readline()
"""


def order_tables(lib):
    """(offset, size) of libheisen.so's .bss tables of the hand-over order (a page or more)."""
    out = subprocess.run(["nm", "-S", str(lib)], capture_output=True, text=True, check=True).stdout
    tabs = []
    for line in out.splitlines():
        f = line.split()
        if len(f) == 4 and f[2] in "bB" and "order" in f[3] and int(f[1], 16) >= 4096:
            tabs.append((int(f[0], 16), int(f[1], 16)))
    return tabs


def present_pages(pid, lo, hi):
    """The pages of [lo, hi) that have a page-table entry."""
    with open(f"/proc/{pid}/pagemap", "rb") as f:
        f.seek((lo >> 12) * 8)
        data = f.read(((hi - lo) >> 12) * 8)
    return {lo + (i << 12) for i in range(len(data) // 8) if struct.unpack_from("<Q", data, i * 8)[0] >> 63}


@pytest.mark.skipif(os.geteuid() != 0, reason="/proc/PID/pagemap's present bits need root")
def test_short_lived_locks_write_few_pages_of_the_hand_over_records(heisen, session, tmp_path):
    """3,000 Python locks made, taken, released and dropped one after the
    other (each at a new address while the heap's quarantine holds the last
    ones): the pages of libheisen's hand-over tables that are present stay
    few (a record taken at a lock's first release is given back when it
    ends and taken by the next one).  Records placed by the address's hash
    wrote nearly every page of a 1 MiB table (~256 pages)."""
    tabs = order_tables(heisen.lib)
    assert any(size >= 256 * 1024 for _, size in tabs), tabs  # the records are among them
    script = tmp_path / "short_lived_locks.py"
    script.write_text(SHORT_LIVED_LOCKS)
    env = heisen.env(session, LD_PRELOAD=heisen.lib)
    proc = subprocess.Popen(["/usr/bin/python3", str(script), "3000"], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        base = None
        with open(f"/proc/{proc.pid}/maps") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 5 and fields[5] == str(heisen.lib) and int(fields[2], 16) == 0:
                    base = int(fields[0].split("-")[0], 16)
                    break
        assert base is not None
        pages = set()
        for off, size in tabs:
            lo = (base + off) & ~4095
            hi = (base + off + size + 4095) & ~4095
            pages |= present_pages(proc.pid, lo, hi)
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    assert proc.returncode == 0
    assert len(pages) <= 32, len(pages)


# ---- a lazily read held stack completed after a lock below it was released -------

BELOW_RELEASED_C = r"""
#include <pthread.h>
pthread_mutex_t below_lock_x = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t below_lock_c = PTHREAD_MUTEX_INITIALIZER;
void take_x(void) { pthread_mutex_lock(&below_lock_x); }
__attribute__((noinline)) void take_c_drop_x(void)
{
	pthread_mutex_lock(&below_lock_c);
	pthread_mutex_unlock(&below_lock_x);
}
void release_c(void) { pthread_mutex_unlock(&below_lock_c); }
void take_c_with_gil(void)
{
	pthread_mutex_lock(&below_lock_c);
	pthread_mutex_unlock(&below_lock_c);
}
"""

BELOW_RELEASED_PY = """\
import ctypes, os, threading
nogil = ctypes.CDLL(os.environ["BELOW_LIB"])   # its calls release the GIL
withgil = ctypes.PyDLL(os.environ["BELOW_LIB"])  # its calls keep it


def take():
    nogil.take_c_drop_x()  # marker: take c


def take_via():
    take()  # marker: call take


def keeper():
    withgil.take_x()
    take_via()  # marker: call take_via
    withgil.release_c()


def grabber():
    withgil.take_c_with_gil()


for fn in (keeper, grabber):
    t = threading.Thread(target=fn)
    t.start()
    t.join()
print("done ok", flush=True)
"""


@pytest.mark.parametrize("got", ["1", "0"])
def test_lock_kept_past_return_after_a_lock_below_it_was_released_keeps_their_lines(heisen, session, tmp_path,
                                                                                    got):
    """below_lock_x is taken with the GIL (a held entry below), then, in one
    call made without the GIL, below_lock_c is taken and below_lock_x
    released: c's entry moves down one place in the held stack.  c is kept
    past the return of its Python callers (take, take_via) and released
    with the GIL held (the c -> GIL edge made there without GOT patching, at
    the GIL retake with it).  Its from-stack is whole, the callers at their
    lines: the lazily read chain was still completed before the thread took
    the GIL back, though the release below it left fewer entries held than
    there were when c was taken."""
    lib = tmp_path / "libbelow.so"
    src = tmp_path / "below.c"
    src.write_text(BELOW_RELEASED_C)
    subprocess.run(["cc", "-O1", "-g", "-shared", "-fPIC", "-pthread", "-o", str(lib), str(src)], check=True)
    script = tmp_path / "below_released.py"
    script.write_text(BELOW_RELEASED_PY)
    p = heisen.preload([SYSTEM_PYTHON, script], session, env={"HEISEN_GOT_PATCH": got, "BELOW_LIB": str(lib)})
    assert p.returncode == 0 and "done ok" in p.stdout, p.stderr
    report = heisen.dump_json(session, expect_rc=1)
    fs = [f for f in findings_of(report, "potential-deadlock")
          if edge_pairs(f) == {("below_lock_c", "GIL"), ("GIL", "below_lock_c")}]
    assert len(fs) == 1, report["findings"]
    (held,) = [e for e in fs[0]["edges"] if e["from"]["name"] == "below_lock_c"]
    st = held["from_stack"]
    assert not st.get("truncated"), st
    names = [fr.get("function") for fr in st["frames"]]
    assert names[0] == "take_c_drop_x", names
    pys = [(fr["function"], fr["line"]) for fr in st["frames"] if fr.get("python")]
    assert pys[:3] == [("take", marker_line(script, "take c")),
                       ("take_via", marker_line(script, "call take")),
                       ("keeper", marker_line(script, "call take_via"))], pys


# ---- the GIL taken back under other held entries of the same count -----------

HELD_ACROSS_C = r"""
#include <pthread.h>
pthread_mutex_t across_lock_a = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t across_lock_b = PTHREAD_MUTEX_INITIALIZER;
void take_a(void) { pthread_mutex_lock(&across_lock_a); }
void nothing(void) { }
void swap_a_for_b(void)
{
	pthread_mutex_unlock(&across_lock_a);
	pthread_mutex_lock(&across_lock_b);
}
void release_b(void) { pthread_mutex_unlock(&across_lock_b); }
void take_b_and_release(void)
{
	pthread_mutex_lock(&across_lock_b);
	pthread_mutex_unlock(&across_lock_b);
}
"""

HELD_ACROSS_PY = """\
import ctypes, os, threading
nogil = ctypes.CDLL(os.environ["ACROSS_LIB"])   # its calls give the GIL up and take it back
withgil = ctypes.PyDLL(os.environ["ACROSS_LIB"])  # its calls keep it


def keeper():
    nogil.take_a()
    nogil.nothing()
    nogil.swap_a_for_b()  # marker: the GIL taken back holding b
    nogil.release_b()


def grabber():
    withgil.take_b_and_release()


for fn in (keeper, grabber):
    t = threading.Thread(target=fn)
    t.start()
    t.join()
print("done ok", flush=True)
"""


def test_gil_taken_back_under_other_held_locks_of_the_same_count_adds_their_edge(heisen, session, tmp_path):
    """A thread takes across_lock_a without the GIL and takes the GIL back
    holding it, twice (a -> GIL; the second take finds every edge of its
    held entries known), then in one call without the GIL releases a and
    takes across_lock_b: the take after it holds as many entries as the
    last (its thread-state lock and one mutex) but another lock, and must
    add b -> GIL; b is released without the GIL (no edge there).  A second
    thread takes b with the GIL (GIL -> b): one potential deadlock through
    the GIL and b, b's edge from that take."""
    lib = tmp_path / "libacross.so"
    src = tmp_path / "across.c"
    src.write_text(HELD_ACROSS_C)
    subprocess.run(["cc", "-O1", "-g", "-shared", "-fPIC", "-pthread", "-o", str(lib), str(src)], check=True)
    script = tmp_path / "held_across.py"
    script.write_text(HELD_ACROSS_PY)
    p = heisen.preload([SYSTEM_PYTHON, script], session, env={"ACROSS_LIB": str(lib)})
    assert p.returncode == 0 and "done ok" in p.stdout, p.stderr
    report = heisen.dump_json(session, expect_rc=1)
    fs = [f for f in findings_of(report, "potential-deadlock")
          if edge_pairs(f) == {("across_lock_b", "GIL"), ("GIL", "across_lock_b")}]
    assert len(fs) == 1, report["findings"]
    (held,) = [e for e in fs[0]["edges"] if e["from"]["name"] == "across_lock_b"]
    pys = [(fr["function"], fr["line"]) for fr in held["to_stack"]["frames"] if fr.get("python")]
    assert ("keeper", marker_line(script, "the GIL taken back holding b")) in pys, pys
