# SPDX-License-Identifier: MIT
"""heisen-dump's promises: the text report, the DOT graph, the exit codes,
and a damaged segment that is named as an error (exit 2) while the rest of
the session is still reported, never a crash of the dumper.

The sessions are real ones, recorded from test targets; the damage is done
to copies of their segments, guided by include/heisen/format.h.
"""
import functools
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import tempfile
import time

import pytest

from conftest import REPO, edge_pairs, fact_int, findings_of, lockname, pyext_dir, target

HEADER_FIXED = struct.Struct("<8sIIIIQ")   # magic, abi, endian, word, header_size, segment_size
TABLE = struct.Struct("<QIIII")            # offset, entry_size, capacity, count, dropped
TABLES_AT = HEADER_FIXED.size
T_EDGES, T_FINDINGS, T_COUNT = 7, 10, 14
ABI_AT = 8


def read_tables(data):
    return [TABLE.unpack_from(data, TABLES_AT + i * TABLE.size) for i in range(T_COUNT)]


@pytest.fixture(scope="module")
def two_process_session(heisen, tmp_path_factory):
    """One session, two processes, each with one potential-deadlock."""
    s = tmp_path_factory.mktemp("dump") / "session"
    pids = {}
    for name in ("abba_sequential", "three_lock_cycle"):
        p = heisen.preload([target(heisen, name)], s)
        assert p.returncode == 0, p.stderr
        pids[name] = fact_int(p.stdout, "pid")
    return s, pids


def copy_session(src, dst):
    shutil.copytree(src, dst)
    return dst


def finding_pids(report):
    return sorted(f["pid"] for f in report["findings"])


# ---- the text report, DOT, exit codes -------------------------------------------


def test_text_report_has_the_banner_locks_and_functions(heisen, two_process_session):
    s, pids = two_process_session
    p = heisen.dump(s)
    assert p.returncode == 1, p.stderr
    out = p.stdout
    for name, pid in pids.items():
        banners = [ln for ln in out.splitlines()
                   if ln.startswith("==== heisen: potential deadlock") and f"pid {pid}" in ln]
        assert len(banners) == 1, (name, out[:2000])
    for word in ("lock_a", "lock_b", "lock_c", "take_a_then_b", "take_b_then_a",
                 "take_b_then_c", "take_c_then_a", "abba_sequential.c", "three_lock_cycle.c"):
        assert word in out, word
    # Findings come first, context after.
    first_finding = out.index("==== heisen: potential deadlock")
    assert all(out.index(f"process {pid}") > first_finding for pid in pids.values())


def test_dot_draws_the_cycle_edges_in_red(heisen, two_process_session):
    s, pids = two_process_session
    p = heisen.dump(s, "--dot")
    assert p.returncode in (0, 1), p.stderr
    dot = p.stdout
    assert dot.lstrip().startswith("digraph") and dot.rstrip().endswith("}")
    assert dot.count("{") == dot.count("}")
    labels = dict(re.findall(r'^\s*"([^"]+)"\s*\[label="([^"\\]+)', dot, re.M))
    edges = re.findall(r'^\s*"([^"]+)"\s*->\s*"([^"]+)"\s*\[([^\]]*)\]', dot, re.M)
    red = {(labels[a], labels[b]) for a, b, attrs in edges if "color=red" in attrs}
    assert red == {("lock_a", "lock_b"), ("lock_b", "lock_a"),
                   ("lock_b", "lock_c"), ("lock_c", "lock_a")}, dot
    # Every edge drawn is one of the two processes' cycles: nothing else, nothing twice.
    assert len(edges) == 5, dot


def test_dot_of_a_clean_session_has_no_red(heisen, session):
    p = heisen.preload([target(heisen, "consistent_order")], session)
    assert p.returncode == 0
    dot = heisen.dump(session, "--dot").stdout
    assert "->" in dot and "color=red" not in dot


def test_exit_codes(heisen, session, tmp_path, two_process_session):
    assert heisen.dump(two_process_session[0]).returncode == 1
    assert heisen.dump(two_process_session[0], "--json").returncode == 1
    p = heisen.preload([target(heisen, "recursive_mutex")], session)
    assert p.returncode == 0
    assert heisen.dump(session).returncode == 0
    assert heisen.dump(session, "--json").returncode == 0
    missing = tmp_path / "no-such-session"
    m = heisen.dump(missing)
    assert m.returncode == 2 and str(missing) in m.stderr, m.stderr


def test_json_is_one_object_with_the_documented_keys(heisen, two_process_session):
    s, pids = two_process_session
    p = heisen.dump(s, "--json")
    report = json.loads(p.stdout)
    assert report["heisen"]["abi"] == 9
    assert report["heisen"]["session"] == str(s)
    assert sorted(pr["pid"] for pr in report["processes"]) == sorted(pids.values())
    assert finding_pids(report) == sorted(pids.values())
    for f in report["findings"]:
        for st in f["stacks"]:
            assert st["frames"], st
            for fr in st["frames"]:
                assert set(fr) >= {"function", "file", "line", "module", "python"}
                assert "libheisen" not in (fr["module"] or ""), fr  # hooks are hidden


# ---- damaged segments ------------------------------------------------------------


def damage_truncate(n):
    def f(path, data):
        path.write_bytes(data[:n])
        return f"truncated to {n} bytes"
    return f


def damage_magic(path, data):
    path.write_bytes(b"NOTHEISN" + data[8:])


def damage_abi(path, data):
    b = bytearray(data)
    struct.pack_into("<I", b, ABI_AT, 99)
    path.write_bytes(bytes(b))


def damage_table_offset(path, data):
    b = bytearray(data)
    off, es, cap, cnt, dr = read_tables(data)[T_EDGES]
    TABLE.pack_into(b, TABLES_AT + T_EDGES * TABLE.size, 1 << 40, es, cap, cnt, dr)
    path.write_bytes(bytes(b))


def damage_segment_size(path, data):
    b = bytearray(data)
    struct.pack_into("<Q", b, 24, len(data) * 4)
    path.write_bytes(bytes(b))


@functools.lru_cache(maxsize=None)
def header_offset(field):
    """offsetof(struct hs_header, field), from include/heisen/format.h as it is."""
    src = ('#include <stdio.h>\n#include <stddef.h>\n#include "heisen/format.h"\n'
           f'int main(void){{printf("%zu", offsetof(struct hs_header, {field}));return 0;}}\n')
    with tempfile.TemporaryDirectory() as d:
        exe = os.path.join(d, "offsetof")
        subprocess.run(["cc", "-x", "c", "-I", str(REPO / "include"), "-o", exe, "-"],
                       input=src, text=True, check=True, capture_output=True)
        return int(subprocess.run([exe], capture_output=True, text=True, check=True).stdout)


def damage_state(word):
    def f(path, data):
        b = bytearray(data)
        struct.pack_into("<Q", b, header_offset("state"), word)
        path.write_bytes(bytes(b))
    return f


def damage_zero_magic(path, data):
    path.write_bytes(bytes(8) + data[8:])


DAMAGE = {
    "empty": damage_truncate(0),
    "zero-magic": damage_zero_magic,
    "state-init": damage_state(0),
    "state-unknown": damage_state(0x4d),
    "short-header": damage_truncate(40),
    "truncated-4k": damage_truncate(4096),
    "truncated-half": None,  # filled in below: half of the real size
    "bad-magic": damage_magic,
    "bad-abi": damage_abi,
    "table-outside": damage_table_offset,
    "size-beyond-file": damage_segment_size,
}


@pytest.mark.parametrize("how", list(DAMAGE))
def test_damaged_segment_is_an_error_and_the_rest_is_reported(heisen, two_process_session,
                                                               tmp_path, how):
    src, pids = two_process_session
    s = copy_session(src, tmp_path / "copy")
    bad_pid, good_pid = pids["abba_sequential"], pids["three_lock_cycle"]
    bad = s / f"{bad_pid}.0.seg"
    data = bad.read_bytes()
    damage = DAMAGE[how] or damage_truncate(len(data) // 2)
    damage(bad, data)

    for fmt in ((), ("--json",)):
        p = heisen.dump(s, *fmt)
        assert p.returncode == 2, (how, fmt, p.returncode, p.stderr)
        assert bad.name in p.stderr, p.stderr
        assert good_pid and str(good_pid) in p.stdout
    report = json.loads(heisen.dump(s, "--json").stdout)
    assert [e["file"] for e in report["errors"]] == [bad.name]
    assert report["errors"][0]["message"]
    # The healthy process and its finding are still there.
    assert good_pid in [pr["pid"] for pr in report["processes"]]
    good = [f for f in findings_of(report, "potential-deadlock") if f["pid"] == good_pid]
    assert len(good) == 1 and len(good[0]["edges"]) == 3
    assert edge_pairs(good[0]) == {("lock_a", "lock_b"), ("lock_b", "lock_c"), ("lock_c", "lock_a")}
    assert bad_pid not in finding_pids(report)


def test_random_damage_never_crashes_the_dumper(heisen, two_process_session, tmp_path):
    """Random bytes over the header and the tables of one segment: the dumper
    may report an error or odd content, but it exits 0, 1 or 2 with valid
    JSON, and the other process is always reported."""
    src, pids = two_process_session
    bad_pid, good_pid = pids["abba_sequential"], pids["three_lock_cycle"]
    original = (src / f"{bad_pid}.0.seg").read_bytes()
    tables = read_tables(original)
    rng = random.Random(20240601)
    s = copy_session(src, tmp_path / "fuzz")
    bad = s / f"{bad_pid}.0.seg"
    regions = [(0, 1024)] + [(off, max(1, min(es * max(cnt, 1), 65536)))
                             for off, es, cap, cnt, _ in tables if off + 1 < len(original)]
    for i in range(40):
        b = bytearray(original)
        for _ in range(rng.choice((1, 4, 32))):
            start, length = rng.choice(regions)
            at = start + rng.randrange(length)
            if at < len(b):
                b[at] = rng.randrange(256)
        if rng.random() < 0.25:  # big counts and ids are the classic overflow
            start, length = rng.choice(regions)
            at = start + rng.randrange(length)
            b[at:at + 4] = rng.choice((b"\xff\xff\xff\xff", b"\x00\x00\x00\x80", b"\xff\xff\xff\x0f"))
        bad.write_bytes(bytes(b[:len(original)]))
        opts = ("--json", "--no-symbols") if i % 4 else ("--json",)
        # Bytes: a damaged module path may reach stderr as it is; stdout is JSON,
        # which must stay UTF-8.
        p = subprocess.run([str(heisen.dump_bin), *opts, str(s)], capture_output=True,
                           timeout=60, env=heisen.env())
        assert p.returncode in (0, 1, 2), (i, p.returncode, p.stderr[-2000:])
        report = json.loads(p.stdout.decode("utf-8"))
        assert good_pid in [pr["pid"] for pr in report["processes"]], i
        if i % 8 == 0:  # the text and DOT paths read the same damaged data (as bytes:
            for fmt in ((), ("--dot",)):  # damaged strings need not be UTF-8 there)
                q = subprocess.run([str(heisen.dump_bin), *fmt, "--no-symbols", str(s)],
                                   capture_output=True, timeout=60, env=heisen.env())
                assert q.returncode in (0, 1, 2), (i, fmt, q.returncode, q.stderr[-2000:])


def test_empty_segment_of_a_dead_process_does_not_hide_the_rest(heisen, two_process_session,
                                                                 tmp_path):
    """A zero-length segment is never one being created (the shim names a
    segment once it is fully formed): it is an error naming the file, and
    the other process is still reported in full."""
    src, pids = two_process_session
    s = copy_session(src, tmp_path / "empty")
    (s / f"{pids['abba_sequential']}.0.seg").write_bytes(b"")
    p = heisen.dump(s, "--json")
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert f"{pids['abba_sequential']}.0.seg: empty" in p.stderr, p.stderr
    report = json.loads(p.stdout)
    assert finding_pids(report) == [pids["three_lock_cycle"]]


def test_json_escapes_argv_that_is_not_utf8(heisen, session):
    """argv is bytes: a non-UTF-8 argument must still give valid JSON."""
    p = subprocess.run([str(target(heisen, "exec_chain")), "stop", b"caf\xe9\xff.txt"],
                       env={**heisen.env(session), "LD_PRELOAD": str(heisen.lib)},
                       capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    raw = subprocess.run([str(heisen.dump_bin), "--json", str(session)], capture_output=True,
                         timeout=60, env=heisen.env()).stdout
    report = json.loads(raw.decode("utf-8"))  # strict: must be UTF-8
    (proc,) = report["processes"]
    assert len(proc["argv"]) == 3 and proc["argv"][1] == "stop"
    assert proc["argv"][2].startswith("caf")


def test_non_segment_files_are_ignored(heisen, two_process_session, tmp_path):
    src, pids = two_process_session
    s = copy_session(src, tmp_path / "extra")
    (s / "run.json").write_text("{}")
    (s / "notes.txt").write_text("hello")
    p = heisen.dump(s, "--json")
    assert p.returncode == 1, p.stderr
    assert json.loads(p.stdout).get("errors", []) == []


def test_a_module_path_naming_a_fifo_is_not_opened(heisen, two_process_session, tmp_path):
    """Module paths come from shared memory: a damaged one naming a FIFO must
    not make the dumper block on open (it says the file is unusable)."""
    import os
    s, pids = two_process_session
    damaged = copy_session(s, tmp_path / "fifo-session")
    import tempfile
    libc = b"/lib/x86_64-linux-gnu/libc.so.6\0"
    short = tempfile.mkdtemp(dir="/tmp", prefix="hf")
    # same length as the libc path, so the strings table keeps its shape
    pad = len(libc) - 1 - len(short) - 1
    assert pad > 0
    fifo = os.path.join(short, "f" * pad)
    os.mkfifo(fifo)
    hit = 0
    for seg in damaged.glob("*.seg"):
        data = seg.read_bytes()
        if libc in data:
            seg.write_bytes(data.replace(libc, fifo.encode() + b"\0", 1))
            hit += 1
    assert hit == 2
    p = heisen.dump(damaged, timeout=30)   # a blocked open would time out here
    assert p.returncode == 1, p.stderr
    assert "not a regular file" in p.stderr
    assert "take_a_then_b" in p.stdout   # the program's own frames still resolve
    shutil.rmtree(short)


def test_process_killed_as_its_segment_appears_is_reported(heisen, tmp_path):
    """SIGKILL a program the moment its segment's name appears (its first
    milliseconds): the segment is already fully formed, so every killed
    process is in the report (vanished), and no file is dropped silently."""
    s = tmp_path / "early"
    s.mkdir()
    env = {**heisen.env(s), "LD_PRELOAD": str(heisen.lib)}
    killed = []
    for _ in range(6):
        before = set(os.listdir(s))
        p = subprocess.Popen(["/bin/sleep", "30"], env=env)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (set(os.listdir(s)) - before):
            pass
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
        assert set(os.listdir(s)) - before, "no segment appeared in 10 s"
        killed.append(p.pid)
    p = heisen.dump(s, "--json")
    report = json.loads(p.stdout)
    errors = {e["file"] for e in report.get("errors", [])}
    listed = {pr["segment"] for pr in report["processes"]}
    for name in os.listdir(s):
        if name.endswith(".seg"):
            assert name in listed or (name in errors and name in p.stderr), (name, p.stderr)
    for pid in killed:
        pr = [x for x in report["processes"] if x["pid"] == pid]
        assert len(pr) == 1 and pr[0]["state"] == "vanished", (pid, report["processes"], p.stderr)
    assert p.returncode in (0, 1) and errors == set(), p.stderr


# ---- symbols: each file read once per session -------------------------------------

FORKED_WORKERS = r'''
import os, sys
n = int(sys.argv[1])
kids = []
for i in range(n):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        own = os.pipe()       # open at exit: each worker has a creation stack to print
        os.write(w, b"x")
        os._exit(0)
    os.close(w)
    os.read(r, 1)
    kids.append(pid)
for pid in kids:
    os.waitpid(pid, 0)
'''


def test_forked_workers_share_one_reading_of_each_file(heisen, session, tmp_path):
    """A pool of forked workers maps the same interpreter and libc: heisen-dump
    opens each of those files once for the whole session (by build-id), not
    once per process, and the frames of every worker are still named."""
    if not shutil.which("strace"):
        pytest.skip("strace is not installed")
    script = tmp_path / "workers.py"
    script.write_text(FORKED_WORKERS)
    workers = 16
    p = heisen.preload(["/usr/bin/python3", script, workers], session)
    assert p.returncode == 0, p.stderr
    trace = tmp_path / "trace"
    d = subprocess.run(["strace", "-f", "-qq", "-e", "trace=openat", "-o", trace,
                        heisen.dump_bin, "--json", session],
                       capture_output=True, text=True, timeout=300, env=heisen.env())
    assert d.returncode in (0, 1), d.stderr
    report = json.loads(d.stdout)
    assert len(report["processes"]) == workers + 1
    exe = os.path.realpath("/usr/bin/python3")
    opens = [ln for ln in trace.read_text().splitlines()
             if f'"{exe}"' in ln and "ENOENT" not in ln]
    assert len(opens) == 1, opens
    # every worker's open pipe still names its native frames
    named = 0
    for proc in report["processes"]:
        for fd in (proc.get("fds") or {}).get("open") or []:
            frames = (fd.get("stack") or {}).get("frames") or []
            if any(f["function"] == "Py_BytesMain" for f in frames) and \
                    any(f["function"] == "__libc_start_main" for f in frames):
                named += 1
                break
    assert named >= workers, named


# ---- the report leads with the answer ----------------------------------------------


def test_report_leads_with_one_summary_line_per_finding(heisen, session):
    """The demo's shape: a Python program whose C extension takes two mutexes
    in opposite orders.  The first lines say what was found, before any
    stack; a run of frames without symbols (Debian's stripped python3.11)
    is one line, and --all unfolds it and adds the threads' last events."""
    p = heisen.preload(["/usr/bin/python3", REPO / "test-targets" / "py_lock_order.py", pyext_dir(heisen)], session)
    assert p.returncode == 0, p.stderr
    pid = fact_int(p.stdout, "pid")
    d = heisen.dump(session)
    assert d.returncode == 1, d.stderr
    lines = d.stdout.splitlines()
    assert lines[0] == f"==== heisen: 1 finding in {session} (1 process) ====", lines[:3]
    m = re.fullmatch(rf"  potential-deadlock pid {pid} \(\S+\): (ext_lock_\w) -> (ext_lock_\w) -> (ext_lock_\w) "
                     r"\(2 threads\)", lines[1])
    assert m and m[1] == m[3] and {m[1], m[2]} == {"ext_lock_a", "ext_lock_b"}, lines[1]
    assert lines[2] == "" and lines[3].startswith("==== heisen: potential deadlock"), lines[:4]
    folded = [ln for ln in lines if re.search(r"#\d+-#\d+ \d+ frames without symbols in \S*python3", ln)]
    assert folded, d.stdout
    assert "    last events:" not in d.stdout and "(each thread's last events: heisen-dump --all)" in d.stdout
    full = heisen.dump(session, "--all")
    assert full.returncode == 1
    assert "frames without symbols" not in full.stdout and "    last events:" in full.stdout
    # Every frame line the folded report left out is in the full one.
    nframes = lambda out: len(re.findall(r"^\s+#\d+ ", out, re.M))
    nfolded = sum(int(re.search(r"(\d+) frames without", ln)[1]) - 1 for ln in folded)
    assert nframes(full.stdout) == nframes(d.stdout) + len(folded) + nfolded


def test_clean_session_of_many_processes_is_one_line(heisen, session):
    """A shell entrypoint starting twenty short processes, all clean: the
    report is one line; --all lists each of them."""
    p = heisen.preload(["/bin/sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; "
                        "do /bin/true; done"], session)
    assert p.returncode == 0, p.stderr
    d = heisen.dump(session)
    assert d.returncode == 0, d.stderr
    lines = d.stdout.strip().splitlines()
    assert len(lines) == 1, d.stdout
    m = re.fullmatch(rf"heisen: no findings in {re.escape(str(session))} \((\d+) processes\)", lines[0])
    assert m and int(m[1]) >= 21, lines
    full = heisen.dump(session, "--all")
    assert full.returncode == 0
    assert len(re.findall(r"^  process \d+\.\d+ \(/usr/bin/true\)", full.stdout, re.M)) == 20, full.stdout


def test_crash_among_clean_processes_leads_and_only_it_has_context(heisen, session):
    """Ten clean children and one that crashes: the summary names the crash
    and the process that ended badly; the tree shows the shell and the
    crashed child with a count of the others; only the crashed child has its
    context (and its threads' last events)."""
    segv = target(heisen, "segv")
    p = heisen.preload(["/bin/sh", "-c", f"for i in 1 2 3 4 5 6 7 8 9 10; do /bin/true; done; {segv}; exit 0"],
                       session)
    assert p.returncode == 0, p.stderr
    cpid = fact_int(p.stdout, "pid")
    d = heisen.dump(session)
    assert d.returncode == 1, d.stderr
    head = d.stdout[:d.stdout.index("\n\n")].splitlines()
    assert head[0].startswith("==== heisen: 1 finding in "), head
    assert re.fullmatch(rf"  crash\s+pid {cpid} \(\S*segv\): SIGSEGV in thread {cpid} at write_through_null.*",
                        head[1]), head
    assert head[2] == "  ended badly:" and re.fullmatch(rf"    pid {cpid} \(\S*segv\): crashed.*SIGSEGV.*", head[3]), head
    tree = d.stdout[d.stdout.index("---- process tree:"):]
    tree = tree[:tree.index("\n\n")]
    assert str(cpid) in tree and "/usr/bin/true" not in tree, tree
    hidden = int(re.search(r"and (\d+) more that ended cleanly", tree)[1])
    assert hidden >= 10, tree
    sections = re.findall(r"^---- process (\d+) ", d.stdout, re.M)
    assert sections == [str(cpid)], sections
    assert "    last events:" in d.stdout
    full = heisen.dump(session, "--all")
    assert "/usr/bin/true" in full.stdout and "(and " not in full.stdout
