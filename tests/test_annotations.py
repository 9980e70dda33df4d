# SPDX-License-Identifier: MIT
"""The annotation API (heisen_name_lock) and timed locks in the lock-order graph.

test-targets/annotated.c names two heap mutexes through a weak reference to
heisen_name_lock, so the same binary runs with and without heisen; the
second thread takes its second lock with pthread_mutex_timedlock.
"""
import subprocess

from conftest import edge_pairs, fact_int, findings_of, target


def test_named_heap_locks_and_a_timed_lock_make_a_named_cycle(heisen, session):
    p = heisen.preload([target(heisen, "annotated")], session)
    assert p.returncode == 0, p.stderr
    assert fact_int(p.stdout, "named") == 1
    report = heisen.dump_json(session, expect_rc=1)
    [f] = findings_of(report, "potential-deadlock")
    assert f["pid"] == fact_int(p.stdout, "pid")
    assert edge_pairs(f) == {("cache.lock", "queue.lock"), ("queue.lock", "cache.lock")}
    # the timed acquisition is the edge queue -> cache, made by the second thread
    [timed] = [e for e in f["edges"] if e["from"]["name"] == "queue.lock"]
    assert timed["tid"] == fact_int(p.stdout, "tid_queue_first")
    assert "queue_then_cache_timed" in [fr["function"] for fr in timed["to_stack"]["frames"]]
    # the text report uses the names too
    assert "cache.lock" in heisen.dump(session).stdout


def test_a_trylock_in_reverse_order_is_not_an_edge(heisen, session):
    p = heisen.preload([target(heisen, "annotated"), "untimed-try"], session)
    assert p.returncode == 0, p.stderr
    report = heisen.dump_json(session, expect_rc=0)
    assert findings_of(report, "potential-deadlock") == []


def test_without_heisen_the_weak_api_is_absent_and_nothing_changes(heisen):
    p = subprocess.run([str(target(heisen, "annotated"))], capture_output=True, text=True,
                       env=heisen.env(), timeout=30)
    assert p.returncode == 0, p.stderr
    assert fact_int(p.stdout, "named") == 0
