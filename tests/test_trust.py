"""What heisen does with input it must not trust, and with places it cannot use.

- A segment is shared memory its owner can forge: the signal heisen sends is
  its own constant, and only to a process verified as the segment's (start
  time, uid, libheisen.so loaded) — `heisen-dump --snapshot`, heisen-run's
  watchdog and `--on-hang kill` alike.
- A FIFO (or anything but a regular file) named `*.seg` is refused without
  blocking, by heisen-dump, heisen-run and the shim.
- A session directory reached through another user's symbolic link, owned
  by someone else, or on a path others may rewrite is refused, and said.
- heisen-run always runs the program (read-only, missing or planted
  /dev/shm, a read-only --dir, nowhere at all: real mount namespaces), with
  the program's exit status, saying what it could not do.
- Every HEISEN_* value goes through one parser: a bad value is said once,
  the default used, the program's output and exit status unchanged.
"""
import os
import shutil
import signal
import struct
import subprocess
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


# ---- the session directory: nobody else's path components -----------------


def sticky_shared_and_secret(tmp_path):
    """A sticky world-writable directory (like /tmp) and a root-only one."""
    needs_root()
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    secret = tmp_path / "secret"
    secret.mkdir(mode=0o700)
    return shared, secret


def shared_with_a_planted_link(tmp_path):
    """A sticky world-writable directory (like /tmp) where uid nobody planted
    `sess` -> a root-only directory."""
    shared, secret = sticky_shared_and_secret(tmp_path)
    link = shared / "sess"
    link.symlink_to(secret)
    os.chown(link, NOBODY, NOBODY, follow_symlinks=False)
    return link, secret


def test_shim_refuses_heisen_dir_through_another_users_symlink(heisen, tmp_path):
    link, secret = shared_with_a_planted_link(tmp_path)
    p = heisen.preload(["sh", "-c", "echo out; exit 4"], link)
    assert (p.returncode, p.stdout) == (4, "out\n"), (p.returncode, p.stdout, p.stderr)
    assert list(secret.iterdir()) == [], "segments written through another user's symlink"
    assert f"refusing session directory {link} is a symbolic link owned by another user (uid {NOBODY})" \
        in p.stderr, p.stderr


def test_heisen_run_refuses_dir_through_another_users_symlink(heisen, tmp_path):
    link, secret = shared_with_a_planted_link(tmp_path)
    p = heisen.run(["--dir", link, "--", "sh", "-c", "echo out; exit 4"], timeout=60)
    assert (p.returncode, p.stdout) == (4, "out\n"), (p.returncode, p.stdout, p.stderr)
    assert list(secret.iterdir()) == [], "segments written through another user's symlink"
    assert f"cannot record into --dir {link}: {link} is a symbolic link owned by another user" in p.stderr, p.stderr
    assert "recording into " in p.stderr and " instead" in p.stderr, p.stderr


def test_session_directory_owned_by_another_user_is_refused(heisen, tmp_path):
    needs_root()
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    theirs.chmod(0o700)
    p = heisen.preload(["sh", "-c", "echo out; exit 4"], theirs)
    assert (p.returncode, p.stdout) == (4, "out\n"), (p.returncode, p.stdout, p.stderr)
    assert list(theirs.iterdir()) == []
    assert f"refusing session directory {theirs} is owned by another user, not by us (uid {NOBODY})" \
        in p.stderr, p.stderr
    p = heisen.run(["--dir", theirs, "--", "sh", "-c", "echo out; exit 4"], timeout=60)
    assert (p.returncode, p.stdout) == (4, "out\n"), (p.returncode, p.stdout, p.stderr)
    assert list(theirs.iterdir()) == []
    assert f"{theirs} is owned by another user, not by us (uid {NOBODY})" in p.stderr, p.stderr


@pytest.mark.parametrize("shape", ["session-writable-by-all", "parent-writable-by-all"])
def test_a_session_path_others_may_rewrite_is_refused(heisen, tmp_path, shape):
    # whoever may write a directory may rename what is in it: the segments, or the rest of the path
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    if shape == "session-writable-by-all":
        session, why = open_dir, f"refusing session directory {open_dir} may be written by its group or by others"
    else:
        session, why = open_dir / "sess", \
            f"refusing session directory {open_dir} is a directory anyone may write to (without the sticky bit)"
    p = heisen.preload(["sh", "-c", "echo out; exit 4"], session)
    assert (p.returncode, p.stdout) == (4, "out\n"), (p.returncode, p.stdout, p.stderr)
    assert why in p.stderr, p.stderr
    assert list(open_dir.rglob("*.seg")) == []


def test_own_symlink_to_the_session_directory_is_followed(heisen, tmp_path):
    real = tmp_path / "real"
    link = tmp_path / "link"
    link.symlink_to(real)     # ours: followed, the directory made through it
    p = heisen.preload(["/bin/true"], link / "sess")
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert len(list((real / "sess").glob("*.seg"))) == 1
    p = heisen.run(["--dir", link / "run", "--", "/bin/true"], timeout=60)
    assert p.returncode == 0, p.stderr
    assert "cannot record" not in p.stderr, p.stderr
    assert len(list((real / "run").glob("*.seg"))) == 1


def test_a_later_image_reopens_the_directory_the_first_one_walked(heisen, tmp_path):
    # the first image walks the path and exports the directory's identity; the
    # images after it reopen that same directory in one openat2 (no symbolic link
    # on the way) and record there
    session = tmp_path / "sess"
    p = heisen.preload(["sh", "-c", 'echo "$HEISEN_SESSION_DIR_ID"; /bin/true; echo done'], session)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    st = session.stat()
    assert p.stdout == f"{st.st_dev}:{st.st_ino}\ndone\n", p.stdout
    assert len(list(session.glob("*.seg"))) == 2


def test_another_users_symlink_planted_after_the_first_image_is_refused(heisen, tmp_path):
    # the first image (sh) walked the path; then the session directory is moved away
    # and uid nobody's link to a root-only directory put in its place: the next
    # image's reopen follows no link (openat2 RESOLVE_NO_SYMLINKS) and the walk
    # refuses the link, as for a first image
    shared, secret = sticky_shared_and_secret(tmp_path)
    session = shared / "sess"
    plant = (f"mv {session} {shared}/old && ln -s {secret} {session} && "
             f"chown -h {NOBODY}:{NOBODY} {session}")
    p = heisen.preload(["sh", "-c", f"env -u LD_PRELOAD sh -c '{plant}' && /bin/echo out"], session)
    assert (p.returncode, p.stdout) == (0, "out\n"), (p.returncode, p.stdout, p.stderr)
    assert list(secret.iterdir()) == [], "segments written through another user's symlink"
    assert f"refusing session directory {session} is a symbolic link owned by another user (uid {NOBODY})" \
        in p.stderr, p.stderr
    assert len(list((shared / "old").glob("*.seg"))) == 2  # sh's and env's, before the plant


# ---- heisen-run always runs the program -------------------------------------


def in_mount_namespace(heisen, setup, args, timeout=90):
    """heisen-run args in a private mount namespace after the shell commands setup."""
    needs_root()
    if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare -m refused")
    cmd = " ".join(f"'{a}'" for a in [heisen.run_bin, *map(str, args)])
    env = heisen.env()
    env.pop("XDG_RUNTIME_DIR", None)
    return subprocess.run(["unshare", "-m", "sh", "-euc", f"{setup}\nexec {cmd}"], env=env,
                          capture_output=True, text=True, timeout=timeout)


PROGRAM = ["--", "sh", "-c", "echo out; exit 7"]


def ran_and_said(p, *said):
    assert (p.returncode, p.stdout) == (7, "out\n"), (p.returncode, p.stdout, p.stderr)
    for s in said:
        assert s in p.stderr, p.stderr


def test_heisen_run_with_a_read_only_dev_shm_records_elsewhere(heisen):
    p = in_mount_namespace(heisen, "mount -t tmpfs -o ro,mode=1777 tmpfs /dev/shm", PROGRAM)
    ran_and_said(p, "cannot record into /dev/shm/heisen-0: /dev/shm/heisen-0 cannot be created: Read-only",
                 "recording into /tmp/heisen-0/sh-")


def test_heisen_run_without_dev_shm_records_elsewhere(heisen):
    p = in_mount_namespace(heisen, "mount -t tmpfs -o mode=755 tmpfs /dev && mknod -m 666 /dev/null c 1 3",
                           PROGRAM)
    ran_and_said(p, "cannot record into /dev/shm/heisen-0: /dev/shm cannot be opened: No such file",
                 "recording into /tmp/heisen-0/sh-")


def test_heisen_run_with_a_planted_dev_shm_base_records_elsewhere(heisen):
    p = in_mount_namespace(heisen, "mount -t tmpfs -o mode=1777 tmpfs /dev/shm\n"
                           f"mkdir /dev/shm/heisen-0\nchown {NOBODY} /dev/shm/heisen-0", PROGRAM)
    ran_and_said(p, f"/dev/shm/heisen-0 is owned by another user, not by us (uid {NOBODY})",
                 "recording into /tmp/heisen-0/sh-")


def test_heisen_run_with_a_read_only_dir_records_in_the_default_place(heisen, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    p = in_mount_namespace(heisen, f"mount -t tmpfs -o ro tmpfs '{ro}'", ["--dir", ro / "sess"] + PROGRAM)
    ran_and_said(p, f"cannot record into --dir {ro / 'sess'}: {ro / 'sess'} cannot be created: Read-only",
                 "recording into /dev/shm/heisen-0/sh-")


def test_heisen_run_with_nowhere_to_record_runs_the_program_unrecorded(heisen):
    # /tmp read-only in place (not covered: the build may live under /tmp)
    p = in_mount_namespace(heisen, "mount -t tmpfs -o ro,mode=1777 tmpfs /dev/shm\n"
                           "mount --bind /tmp /tmp\nmount -o remount,bind,ro /tmp", PROGRAM)
    ran_and_said(p, "NOT RECORDING: no usable session directory",
                 "NOT RECORDED: sh ran without heisen")


# ---- HEISEN_* values: one parser, one message, the documented default ---------

PY = ["/usr/bin/python3", "-c", "import sys; print('out'); sys.exit(4)"]


@pytest.fixture(scope="module")
def baseline(heisen, tmp_path_factory):
    """The program's output, exit status and quarantine with no HEISEN_* setting."""
    d = tmp_path_factory.mktemp("baseline") / "s"
    p = heisen.preload(PY, d)
    assert (p.returncode, p.stdout, p.stderr) == (4, "out\n", ""), p.stderr
    r = heisen.dump_json(d, expect_rc=0)
    return r["processes"][0]["heap"]["quarantine_bytes"]


BAD_VALUES = [
    ("HEISEN_QUARANTINE_MB", "-1", "out of range (0 to 1048576); using 64"),
    ("HEISEN_QUARANTINE_MB", "abc", "not a number; using 64"),
    ("HEISEN_QUARANTINE_MB", str(2 ** 44), "out of range (0 to 1048576); using 64"),
    ("HEISEN_QUARANTINE_MB", "99999999999999999999999", "out of range (0 to 1048576); using 64"),
    ("HEISEN_THREADS", "abc", "not a number; using 128"),
    ("HEISEN_THREADS", "2", "out of range (4 to 4096); using 128"),
    ("HEISEN_RING", "12x", "not a number; using 256"),
    ("HEISEN_FD_NUMBERS", "1e3", "not a number; using 1024"),
    ("HEISEN_GUARD_SLOTS", "0", "out of range (1 to 16384); using 64"),
    ("HEISEN_GUARD_RATE", "-5", "out of range (0 to 4294967295); using 5000"),
    ("HEISEN_DISABLE", "10", "not 0 or 1; using 0"),
    ("HEISEN_HEAP", "2", "not 0 or 1; using 1"),
    ("HEISEN_FDS", "off!", "not 0 or 1; using 1"),
    ("HEISEN_PY_LOCKS", "11", "not 0 or 1; using 1"),
    ("HEISEN_GOT_PATCH", "00", "not 0 or 1; using 1"),
    ("HEISEN_HEAP_STACKS", "fulll", "not one of site, full, none; using site"),
    ("HEISEN_FD_STACKS", "all", "not one of site, full; using site"),
    ("HEISEN_ON_HEAP_ERROR", "ignore", "not one of abort, continue; using abort"),
]


@pytest.mark.parametrize("name,value,why", BAD_VALUES, ids=[f"{n}={v}" for n, v, _ in BAD_VALUES])
def test_a_bad_setting_is_said_once_and_the_default_used(heisen, tmp_path, baseline, name, value, why):
    session = tmp_path / "s"
    p = heisen.preload(PY, session, env={name: value})
    # the program's output and exit status are its own; one line says what was ignored
    assert (p.returncode, p.stdout) == (4, "out\n"), (p.returncode, p.stdout, p.stderr)
    assert p.stderr == f"heisen: ignoring {name}={value}: {why}\n", p.stderr
    # recorded, with the default
    r = heisen.dump_json(session, expect_rc=0)
    (proc,) = r["processes"]
    assert proc["heap"]["quarantine_bytes"] == baseline


def test_good_settings_are_silent_and_taken(heisen, tmp_path):
    # booleans are 0/1, no/yes, false/true, off/on, as a whole
    p = heisen.preload(PY, tmp_path / "s", env={
        "HEISEN_QUARANTINE_MB": "20", "HEISEN_THREADS": "64", "HEISEN_HEAP_STACKS": "none",
        "HEISEN_FDS": "1", "HEISEN_GOT_PATCH": "1", "HEISEN_ON_HEAP_ERROR": "abort"})
    assert (p.returncode, p.stdout, p.stderr) == (4, "out\n", ""), p.stderr
    (proc,) = heisen.dump_json(tmp_path / "s", expect_rc=0)["processes"]
    assert proc["heap"]["quarantine_bytes"] == 20 << 20
    p = heisen.preload(PY, tmp_path / "off", env={"HEISEN_HEAP": "off"})
    assert (p.returncode, p.stdout, p.stderr) == (4, "out\n", ""), p.stderr
    (proc,) = heisen.dump_json(tmp_path / "off", expect_rc=0)["processes"]
    assert not (proc.get("heap") or {}).get("quarantine_bytes"), proc.get("heap")


def test_heisen_quiet_silences_the_settings_message(heisen, tmp_path, baseline):
    p = heisen.preload(PY, tmp_path / "s", env={"HEISEN_QUARANTINE_MB": "-1", "HEISEN_QUIET": "1"})
    assert (p.returncode, p.stdout, p.stderr) == (4, "out\n", ""), p.stderr
    (proc,) = heisen.dump_json(tmp_path / "s", expect_rc=0)["processes"]
    assert proc["heap"]["quarantine_bytes"] == baseline


def test_a_fifo_named_seg_in_an_old_default_session_does_not_block_the_program(heisen):
    # the shim looks at the finished sessions of /dev/shm/heisen-$UID when it makes a new one
    needs_root()
    if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare -m refused")
    setup = ("mount -t tmpfs -o mode=1777 tmpfs /dev/shm\nmkdir -m 700 /dev/shm/heisen-0\n"
             "mkdir -m 700 /dev/shm/heisen-0/old-1-1\nmkfifo /dev/shm/heisen-0/old-1-1/5.0.seg\n"
             f"exec env LD_PRELOAD={heisen.lib} sh -c 'echo out; exit 3'")
    p = subprocess.run(["unshare", "-m", "sh", "-euc", setup], env=heisen.env(),
                       capture_output=True, text=True, timeout=30)
    assert (p.returncode, p.stdout) == (3, "out\n"), (p.returncode, p.stdout, p.stderr)
