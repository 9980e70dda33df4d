# SPDX-License-Identifier: MIT
"""heisen in a real container, as the README's "In Docker" shows it: an image
built from docker/Containerfile (heisen installed with `meson install` from
the repository), heisen-run as the ENTRYPOINT and PID 1, a USER that is not
root, podman's default 64 MiB /dev/shm.

The Debian 12 base images are made once per machine by
docker/base-images.sh (debootstrap, cached under /var/cache/heisen-test and
in podman's store); the image build reuses podman's layer cache while the
sources do not change.  The tests skip only where the kernel or the runtime
refuses to run a container, with its refusal as the reason.
"""
import json
import os
import resource
import shutil
import subprocess
import time
import uuid

import pytest

from conftest import REPO

RUNTIME = "runc"   # this machine's hybrid cgroups: crun refuses, runc runs
IMAGE = "localhost/heisen-test:latest"

APPS = {
    "pool.py": r'''
import multiprocessing as mp, os
def work(i):
    return sum(range(20000)) + i
if __name__ == "__main__":
    pool = mp.get_context("fork").Pool(20)
    print("sum", sum(pool.map(work, range(200))), "uid", os.getuid(), "ppid", os.getppid(), flush=True)
    pool.close()
    pool.join()
''',
    "idle.py": r'''
import time
print("ready", flush=True)
time.sleep(600)
''',
    "crash.py": r'''
import ctypes
def read_null():
    return ctypes.string_at(0)
print("crashing", flush=True)
read_null()
''',
    "oom.py": r'''
import concurrent.futures as cf, multiprocessing as mp
def hog():
    blocks = []
    while True:
        blocks.append(bytearray(16 << 20))
if __name__ == "__main__":
    with cf.ProcessPoolExecutor(2, mp_context=mp.get_context("fork")) as ex:
        try:
            ex.submit(hog).result()
        except Exception as e:
            print("pool broke:", type(e).__name__, flush=True)
''',
    "hang.py": r'''
import threading
lock = threading.Lock()
def take_twice():
    lock.acquire()
    lock.acquire()   # never returns: the lock is ours already
print("hanging", flush=True)
take_twice()
''',
}


def _limit(which, cap):
    soft, _ = resource.getrlimit(which)
    return cap if soft == resource.RLIM_INFINITY else min(soft, cap)


def _podman(*args, timeout=300, check=False):
    p = subprocess.run(["podman", *map(str, args)], capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        pytest.fail(f"podman {' '.join(map(str, args))}: {p.stderr.strip()[-2000:]}")
    return p


REFUSALS = ("OCI runtime", "cgroup", "operation not permitted", "permission denied",
            "namespace", "not supported", "runc")


def _skip_if_refused(p, what):
    err = (p.stderr or "").strip()
    if any(r.lower() in err.lower() for r in REFUSALS):
        pytest.skip(f"{what}: the runtime refused: {err.splitlines()[-1] if err else p.returncode}")


@pytest.fixture(scope="module")
def image():
    if not shutil.which("podman"):
        pytest.skip("podman is not installed (./dev installs it: apt-get install podman runc debootstrap)")
    bases = subprocess.run([str(REPO / "docker" / "base-images.sh")], capture_output=True, text=True,
                           timeout=1800)
    assert bases.returncode == 0, bases.stderr
    base, build = bases.stdout.split()
    p = _podman("build", "--runtime", RUNTIME, "-q", "-f", REPO / "docker" / "Containerfile",
                "--ignorefile", REPO / "docker" / "containerignore",
                "--build-arg", f"BASE_IMAGE={base}", "--build-arg", f"BUILD_IMAGE={build}",
                "-t", IMAGE, REPO, timeout=1200)
    if p.returncode != 0:
        _skip_if_refused(p, "podman build")
        pytest.fail(f"podman build: {p.stderr[-3000:]}")
    return IMAGE


@pytest.fixture
def apps(tmp_path):
    d = tmp_path / "app"
    d.mkdir()
    for name, text in APPS.items():
        (d / name).write_text(text)
    d.chmod(0o755)
    return d


@pytest.fixture
def reports(tmp_path):
    d = tmp_path / "reports"
    d.mkdir()
    d.chmod(0o777)   # written by the container's user, uid 1000
    return d


class Container:
    """One named container; logs stay readable until it is removed."""

    def __init__(self, image, apps, extra=(), entrypoint=None, cmd=(), detach=False):
        self.name = f"heisen-test-{uuid.uuid4().hex[:10]}"
        args = ["run", "--name", self.name, "--runtime", RUNTIME,
                "--ulimit", f"nofile={_limit(resource.RLIMIT_NOFILE, 4096)}:{_limit(resource.RLIMIT_NOFILE, 4096)}",
                "--ulimit", f"nproc={_limit(resource.RLIMIT_NPROC, 4096)}:{_limit(resource.RLIMIT_NPROC, 4096)}",
                "-v", f"{apps}:/app:ro", *extra]
        if entrypoint:
            args += ["--entrypoint", json.dumps(entrypoint)]
        if detach:
            args.append("-d")
        self.run = _podman(*args, image, *cmd, timeout=300)
        if self.run.returncode not in (0,) and detach:
            _skip_if_refused(self.run, "podman run")
        if not detach and self.run.returncode in (125, 126, 127):
            _skip_if_refused(self.run, "podman run")

    def logs(self):
        p = _podman("logs", self.name)
        return p.stdout + p.stderr

    def exit_code(self):
        return int(_podman("inspect", "-f", "{{.State.ExitCode}}", self.name, check=True).stdout.strip())

    def remove(self):
        _podman("rm", "-f", "-t", "0", self.name)


@pytest.fixture
def containers():
    made = []
    yield lambda *a, **kw: made.append(Container(*a, **kw)) or made[-1]
    for c in made:
        c.remove()


HEISEN_RUN = "/usr/local/bin/heisen-run"


def test_pool_of_20_workers_as_pid1_with_default_shm(image, apps, reports, containers):
    c = containers(image, apps, extra=["-v", f"{reports}:/reports"],
                   entrypoint=[HEISEN_RUN, "--report-dir", "/reports", "--"],
                   cmd=["python3", "/app/pool.py"])
    logs = c.logs()
    assert c.run.returncode == 0, logs
    assert "SIGBUS" not in logs and "Bus error" not in logs, logs
    # heisen-run is PID 1 (the parent of the command), the user is not root
    assert "uid 1000 ppid 1" in logs, logs
    [rep] = reports.glob("*.report.json")
    report = json.loads(rep.read_text())
    procs = report["processes"]
    # the command and its 20 workers, every one recorded in 64 MiB
    assert len(procs) == 21, [p["pid"] for p in procs]
    assert all(p["state"] in ("exited", "killed") for p in procs), [p["state"] for p in procs]
    assert (rep.parent / rep.name.replace(".json", ".txt")).read_text().strip()


def test_podman_stop_forwards_sigterm_and_says_one_line(image, apps, containers):
    c = containers(image, apps, cmd=["python3", "/app/idle.py"], detach=True)
    assert c.run.returncode == 0, c.run.stderr
    deadline = time.time() + 60
    while "ready" not in c.logs() and time.time() < deadline:
        time.sleep(0.2)
    assert "ready" in c.logs()
    stop = _podman("stop", "-t", "30", c.name, timeout=120)
    assert stop.returncode == 0, stop.stderr
    assert c.exit_code() == 143
    ours = [ln for ln in c.logs().splitlines() if ln.startswith("heisen")]
    assert len(ours) == 1, ours
    assert "stopped by SIGTERM" in ours[0] and "no findings" in ours[0], ours


def test_crash_report_in_the_log_and_in_the_report_dir(image, apps, reports, containers):
    c = containers(image, apps, extra=["-v", f"{reports}:/reports"],
                   entrypoint=[HEISEN_RUN, "--report-dir", "/reports", "--"],
                   cmd=["python3", "/app/crash.py"])
    logs = c.logs()
    assert c.run.returncode == 128 + 11, logs
    assert "==== heisen: crash (SIGSEGV)" in logs, logs
    assert "read_null (/app/crash.py:4) [python]" in logs, logs
    [txt] = reports.glob("*.report.txt")
    assert "==== heisen: crash (SIGSEGV)" in txt.read_text()
    [js] = reports.glob("*.report.json")
    report = json.loads(js.read_text())
    crash = [f for f in report["findings"] if f["kind"] == "crash"]
    assert crash, report["findings"]


def test_hang_report_in_the_log(image, apps, containers):
    c = containers(image, apps, entrypoint=[HEISEN_RUN, "--hang-timeout", "2", "--on-hang", "kill", "--"],
                   cmd=["python3", "/app/hang.py"])
    logs = c.logs()
    assert c.run.returncode == 128 + 9, logs
    assert "hang detected" in logs and "==== heisen: hang in pid" in logs, logs
    assert "take_twice (/app/hang.py:6) [python]" in logs, logs


def test_oom_killed_worker_is_named_in_the_log(image, apps, containers):
    """seed 002 in a container: --memory 200m, a pool worker allocating
    without bound; Python sees only BrokenProcessPool, the log names the
    worker the OOM killer took."""
    c = containers(image, apps, extra=["--memory", "200m", "--memory-swap", "200m"],
                   cmd=["python3", "/app/oom.py"])
    logs = c.logs()
    if c.run.returncode != 0 and "memory" in c.run.stderr.lower():
        pytest.skip(f"the runtime refused --memory: {c.run.stderr.strip()}")
    assert "pool broke: BrokenProcessPool" in logs, logs
    assert "==== heisen: OOM kill in pid" in logs, logs
    assert "was killed by the OOM killer" in logs, logs


def test_privilege_drop_in_a_root_container_is_said_not_hidden(image, apps, containers):
    """The gosu shape: the container starts as root (heisen-run as PID 1,
    root), the entrypoint's command drops to uid 1000 with setpriv (in
    Debian's minbase: util-linux) and execs the service.  The dropped
    process cannot write root's session: the log says so for its pid, never
    "no findings" and never that it was killed, and the exit status is the
    service's."""
    c = containers(image, apps, extra=["--user", "0"],
                   cmd=["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups",
                        "python3", "-c", "import os; print('dropped', os.getpid(), os.getuid())"])
    logs = c.logs()
    assert c.run.returncode == 0, logs
    line = [ln for ln in logs.splitlines() if ln.startswith("dropped ")]
    assert line and line[0].split()[2] == "1000", logs
    assert "no findings" not in logs, logs
    assert "not recorded after a privilege drop" in logs, logs
    assert "killed" not in logs, logs

