"""What heisen does with input it must not trust, and with places it cannot use.

- A segment is shared memory its owner can forge: the signal heisen sends is
  its own constant, and only to a process verified as the segment's (start
  time, uid, libheisen.so loaded) — `heisen-dump --snapshot`, heisen-run's
  watchdog and `--on-hang kill` alike.
- A FIFO (or anything but a regular file) named `*.seg` is refused without
  blocking, by heisen-dump and heisen-run.
"""
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, target

NOBODY = 65534


@pytest.fixture(scope="module")
def header_layout(tmp_path_factory):
    """Offsets of the hs_header fields a forger rewrites, from format.h itself."""
    d = tmp_path_factory.mktemp("layout")
    src = d / "layout.c"
    src.write_text(
        "#include <stddef.h>\n#include <stdio.h>\n#include <heisen/format.h>\n"
        "int main(void) { printf(\"%zu %zu %zu %zu %llu\\n\", offsetof(struct hs_header, pid),\n"
        " offsetof(struct hs_header, start_ticks), offsetof(struct hs_header, state),\n"
        " offsetof(struct hs_header, snapshot_signal),\n"
        " (unsigned long long)HS_STATE_PACK(HS_STATE_RUNNING, 0)); return 0; }\n")
    subprocess.run(["cc", "-std=c11", "-I", str(REPO / "include"), "-o", str(d / "layout"), str(src)],
                   check=True, timeout=60)
    out = subprocess.run([str(d / "layout")], capture_output=True, text=True, check=True).stdout.split()
    return dict(zip(["pid", "start_ticks", "state", "snapshot_signal", "running"], map(int, out)))


def start_ticks(pid):
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[19])


def real_segment(heisen, tmp_path):
    """The segment of a real recorded run (/bin/true under the shim)."""
    d = tmp_path / "donor"
    p = heisen.preload(["/bin/true"], d)
    assert p.returncode == 0, p.stderr
    (seg,) = d.glob("*.seg")
    return seg


def forge(layout, donor, dst, pid, ticks, sig, owner=None):
    """A copy of donor that names pid (started at ticks) and asks for signal sig."""
    b = bytearray(donor.read_bytes())
    struct.pack_into("<i", b, layout["pid"], pid)
    struct.pack_into("<Q", b, layout["start_ticks"], ticks)
    struct.pack_into("<Q", b, layout["state"], layout["running"])
    struct.pack_into("<i", b, layout["snapshot_signal"], sig)
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(bytes(b))
    if owner is not None:
        os.chown(dst, owner, owner)


def needs_root():
    if os.geteuid() != 0:
        pytest.skip("forging a segment owned by another user needs root")


def test_snapshot_does_not_sigkill_another_users_process_named_by_a_forged_segment(
        heisen, session, tmp_path, header_layout):
    needs_root()
    victim = subprocess.Popen(["sleep", "60"])
    try:
        # uid nobody forges a segment naming root's process, with its real start time
        forge(header_layout, real_segment(heisen, tmp_path), session / f"{victim.pid}.0.seg",
              victim.pid, start_ticks(victim.pid), signal.SIGKILL, owner=NOBODY)
        p = heisen.dump(session, "--snapshot", timeout=60)
        time.sleep(0.2)
        assert victim.poll() is None, f"victim died: {victim.returncode}; {p.stderr}"
        assert f"not asking pid {victim.pid} for a snapshot" in p.stderr, p.stderr
        assert "uid 0" in p.stderr and f"uid {NOBODY}" in p.stderr, p.stderr
    finally:
        victim.kill()
        victim.wait(timeout=10)


def test_snapshot_skips_a_process_of_the_same_user_without_heisen(heisen, session, tmp_path, header_layout):
    victim = subprocess.Popen(["sleep", "60"])
    try:
        forge(header_layout, real_segment(heisen, tmp_path), session / f"{victim.pid}.0.seg",
              victim.pid, start_ticks(victim.pid), signal.SIGKILL)
        p = heisen.dump(session, "--snapshot", timeout=60)
        time.sleep(0.2)
        assert victim.poll() is None, f"victim died: {victim.returncode}; {p.stderr}"
        assert "libheisen.so is not loaded in it" in p.stderr, p.stderr
    finally:
        victim.kill()
        victim.wait(timeout=10)


def test_snapshot_sends_heisens_signal_not_the_number_the_segment_names(heisen, session, header_layout):
    # a real recorded process whose segment was rewritten to name SIGTERM:
    # it must get SIGRTMAX-3 (which its shim answers) and keep running
    env = heisen.env(session)
    env["LD_PRELOAD"] = str(heisen.lib)
    proc = subprocess.Popen(["/usr/bin/python3", "-c",
                             "import time, sys; print('ready', flush=True); time.sleep(30)"],
                            env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().split() == ["ready"]
        (seg,) = session.glob(f"{proc.pid}.*.seg")
        with open(seg, "r+b") as f:
            f.seek(header_layout["snapshot_signal"])
            f.write(struct.pack("<i", signal.SIGTERM))
        p = heisen.dump(session, "--snapshot", timeout=60)
        time.sleep(0.2)
        assert proc.poll() is None, f"recorded process died: {proc.returncode}; {p.stderr}"
        assert "not asking" not in p.stderr, p.stderr
    finally:
        proc.kill()
        proc.wait(timeout=10)


FORGER = r"""
import os, struct, sys, time
src, dst, pid, off_pid, off_ticks, off_state, off_sig, running = sys.argv[1:9]
b = bytearray(open(src, 'rb').read())
struct.pack_into('<i', b, int(off_pid), int(pid))
struct.pack_into('<Q', b, int(off_ticks), 0)          # no start time: "do not check"
struct.pack_into('<Q', b, int(off_state), int(running))
struct.pack_into('<i', b, int(off_sig), 9)
open(os.path.join(os.environ['HEISEN_DIR'], dst), 'wb').write(b)
print('forged', flush=True)
time.sleep(float(sys.argv[9]))
"""


def deadlocked_segment(heisen, tmp_path):
    """The segment of a real process two of whose threads deadlock (abba), copied while it hangs."""
    d = tmp_path / "deadlocked"
    env = heisen.env(d)
    env["LD_PRELOAD"] = str(heisen.lib)
    proc = subprocess.Popen([str(target(heisen, "abba_deadlock"))], env=env, stdout=subprocess.PIPE, text=True)
    try:
        for _ in range(10):
            if proc.stdout.readline().strip() == "waiting":
                break
        time.sleep(1.5)
        (seg,) = d.glob(f"{proc.pid}.*.seg")
        copy = tmp_path / "donor-deadlocked.seg"
        shutil.copyfile(seg, copy)
        return copy
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.mark.parametrize("on_hang", ["report", "kill"])
def test_watchdog_does_not_signal_a_process_named_by_a_forged_segment(
        heisen, session, tmp_path, header_layout, on_hang):
    donor = deadlocked_segment(heisen, tmp_path)
    victim = subprocess.Popen(["sleep", "60"])
    L = header_layout
    try:
        opts = ["--dir", session, "--hang-timeout", "1"]
        if on_hang == "kill":
            opts += ["--on-hang", "kill"]
        p = heisen.run(opts + ["--", "/usr/bin/python3", "-c", FORGER, donor, f"{victim.pid}.0.seg",
                               victim.pid, L["pid"], L["start_ticks"], L["state"], L["snapshot_signal"],
                               L["running"], "4"], timeout=90)
        time.sleep(0.2)
        assert victim.poll() is None, f"victim died: {victim.returncode}; {p.stderr}"
        assert "forged" in p.stdout, (p.stdout, p.stderr)
        assert "hang detected" in p.stderr, p.stderr
        assert f"to pid {victim.pid}, named by a segment" in p.stderr, p.stderr
    finally:
        victim.kill()
        victim.wait(timeout=10)


def test_heisen_dump_refuses_a_fifo_named_seg_without_blocking(heisen, session, tmp_path):
    # a real segment next to the FIFO is still reported
    p = heisen.preload(["/bin/true"], session)
    assert p.returncode == 0, p.stderr
    os.mkfifo(session / "4242.0.seg")
    os.mkfifo(session / "4242.0.stall")
    p = heisen.dump(session, timeout=20)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "4242.0.seg: not a regular file" in p.stderr, p.stderr
    assert "(1 process)" in p.stdout, p.stdout


def test_heisen_run_ends_with_the_programs_status_when_it_left_a_fifo_named_seg(heisen, session):
    t0 = time.monotonic()
    p = heisen.run(["--dir", session, "--", "sh", "-c", 'mkfifo "$HEISEN_DIR/99999.0.seg"; exit 3'],
                   timeout=30)
    assert p.returncode == 3, (p.returncode, p.stderr)
    assert time.monotonic() - t0 < 20
    assert "99999.0.seg: not a regular file" in p.stderr, p.stderr
