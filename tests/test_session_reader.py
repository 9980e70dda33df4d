# SPDX-License-Identifier: MIT
"""Both readers of a session agree on odd files in it.

heisen-dump (dumper/session.c) and heisen-run (its watchdog and its
end-of-run verdict, launcher/segment.c and internal/seg_verdict.h) read a
session with one rule (internal/seg_dir.h, internal/seg_header.h):

- a segment whose header_size is larger than this reader's struct (a newer
  writer's longer header) is read by both: heisen-dump lists the process and
  the watchdog watches it (a deadlock in it is a hang);
- a `*.seg` FIFO is refused by both without blocking ("not a regular file");
- a `*.seg` not named `<pid>.<image>.seg` (a copy someone left) is never read
  as a process; heisen-dump names it as an error and the end-of-run verdict
  does not call the session clean;
- the shim's temporary `.<pid>.new` is nobody's business: a clean run stays
  clean.
"""
import json

from conftest import SYSTEM_PYTHON, fact_int

ODD_SESSION = r'''
import os, shutil, sys, threading, time
d, me = os.environ["HEISEN_DIR"], os.getpid()
seg = f"{d}/{me}.0.seg"
with open(seg, "r+b") as f:          # a writer with a longer header (8 bytes more)
    f.seek(20)
    n = int.from_bytes(f.read(4), "little")
    f.seek(20)
    f.write((n + 8).to_bytes(4, "little"))
shutil.copyfile(seg, f"{d}/copy-of-{me}.seg")   # misnamed: not <pid>.<image>.seg
os.mkfifo(f"{d}/4242.0.seg")                    # not a regular file
open(f"{d}/.4243.new", "w").close()             # the shim's temporary name
print("pid", me, flush=True)
time.sleep(float(sys.argv[1]))   # past HR_REMAP_MS: the watchdog maps the segment again
a, b = threading.Lock(), threading.Lock()
def other():
    with b:
        time.sleep(0.2)
        with a:
            pass
def give_up():                   # a watchdog that never sees it: end anyway
    time.sleep(30)
    print("gave up", flush=True)
    os._exit(5)
threading.Thread(target=give_up, daemon=True).start()
t = threading.Thread(target=other, daemon=True)
with a:
    t.start()
    time.sleep(0.2)
    print("stuck", flush=True)
    with b:
        pass
'''


def test_both_readers_agree_on_a_longer_header_a_fifo_and_a_misnamed_segment(heisen, session, tmp_path):
    script = tmp_path / "odd_session.py"
    script.write_text(ODD_SESSION)
    p = heisen.run(["--dir", session, "--hang-timeout", "2", "--on-hang", "kill", "--",
                    SYSTEM_PYTHON, script, "5.5"], timeout=120)
    pid = fact_int(p.stdout, "pid")
    # the watchdog read the segment with the longer header: the deadlock is a hang
    assert "gave up" not in p.stdout, p.stderr[-3000:]
    assert p.returncode == 137, (p.returncode, p.stderr[-3000:])
    assert "hang detected" in p.stderr and f"in pid {pid}" in p.stderr, p.stderr[-3000:]
    # heisen-run's report (heisen-dump's) names the two odd segment files, not the .new
    misnamed = f"copy-of-{pid}.seg"
    assert f"{misnamed}: not named <pid>.<image>.seg" in p.stderr, p.stderr[-3000:]
    assert "4242.0.seg: not a regular file" in p.stderr, p.stderr[-3000:]
    assert ".4243.new" not in p.stderr

    d = heisen.dump(session, "--json")
    assert d.returncode == 2, (d.returncode, d.stderr)
    report = json.loads(d.stdout)
    errors = {e["file"] for e in report.get("errors", [])}
    assert errors == {misnamed, "4242.0.seg"}, report.get("errors")
    # the longer header is read, and its process is listed once (the copy is not read)
    procs = [x for x in report["processes"] if x["pid"] == pid]
    assert len(procs) == 1 and procs[0]["segment"] == f"{pid}.0.seg", report["processes"]


CLEAN_WITH_A_COPY = r'''
import os, shutil, sys
d, me = os.environ["HEISEN_DIR"], os.getpid()
if sys.argv[1] == "copy":
    shutil.copyfile(f"{d}/{me}.0.seg", f"{d}/saved.seg")
open(f"{d}/.{me + 1}.new", "w").close()
print("pid", me, flush=True)
'''


def test_a_misnamed_segment_is_never_a_clean_end(heisen, session, tmp_path):
    """A correct program leaves a copy of its segment under another name:
    the end-of-run verdict does not call the run clean, and the report it
    prints is heisen-dump's error naming the file."""
    script = tmp_path / "clean_with_a_copy.py"
    script.write_text(CLEAN_WITH_A_COPY)
    p = heisen.run(["--dir", session, "--", SYSTEM_PYTHON, script, "copy"], timeout=60)
    assert "saved.seg: not named <pid>.<image>.seg" in p.stderr, p.stderr[-3000:]
    assert "no findings" not in p.stderr.splitlines()[-1:], p.stderr[-3000:]
    d = heisen.dump(session, "--json")
    assert d.returncode == 2 and {e["file"] for e in json.loads(d.stdout)["errors"]} == {"saved.seg"}, d.stderr


def test_the_shims_temporary_name_leaves_a_clean_run_clean(heisen, session, tmp_path):
    script = tmp_path / "clean_with_a_copy.py"
    script.write_text(CLEAN_WITH_A_COPY)
    p = heisen.run(["--dir", session, "--", SYSTEM_PYTHON, script, "none"], timeout=60)
    assert p.returncode == 0, (p.returncode, p.stderr)
    assert "====" not in p.stderr and ".new" not in p.stderr, p.stderr
    d = heisen.dump(session, "--json")
    assert d.returncode == 0 and json.loads(d.stdout).get("errors", []) == [], d.stderr
