# SPDX-License-Identifier: MIT
"""Where a process start writes: the page-table pages it costs.

Every 2 MiB range of address space a process touches needs a page-table
page, made at the first touch and freed at exit (on the Firecracker guest
measured, ~45-60 us each, where a page costs ~12 us: bench/README.md
"Process start: page-table pages").  A start under heisen writes its
segment's header and the tables every process writes (a thread slot and
its ring, the fd table and its event ring), and libheisen's own variables:
the segment is mapped at a 2 MiB boundary with those tables first, and
libheisen's large tables lie after the rest of .bss, so each adds one such
range, not three and two.  Checked on a live `sleep` with the heap checker
off (its first allocations touch the stack tables, which lie further on)
through /proc/PID/pagemap (root reads the present bit).  And finding the
vDSO's clock reads the vDSO's first page only (its dynamic section), not
its section headers' page, a fault every image paid for nothing.
"""
import os
import struct
import subprocess
import time

import pytest

MIB2 = 2 << 20


def maps_of(pid):
    """(start, end, path) of each mapping of pid."""
    out = []
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            fields = line.split()
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            out.append((lo, hi, fields[1], fields[5] if len(fields) > 5 else ""))
    return out


def present_pages(pid, lo, hi):
    """Addresses of the pages of [lo, hi) that have a page-table entry."""
    with open(f"/proc/{pid}/pagemap", "rb") as f:
        f.seek((lo >> 12) * 8)
        data = f.read(((hi - lo) >> 12) * 8)
    return [lo + (i << 12) for i in range(len(data) // 8)
            if struct.unpack_from("<Q", data, i * 8)[0] >> 63]


@pytest.fixture
def sleeper(heisen, session):
    """A `sleep` under heisen (heap checker and guard pages off), once its segment is named."""
    env = heisen.env(session, HEISEN_HEAP=0, HEISEN_GUARD_RATE=0, LD_PRELOAD=heisen.lib)
    proc = subprocess.Popen(["sleep", "30"], env=env)
    try:
        deadline = time.monotonic() + 20
        while not list(session.glob(f"{proc.pid}.*.seg")) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)  # past the constructor: the start's writes are done
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="/proc/PID/pagemap's present bits need root")
def test_a_start_writes_one_2mib_range_of_its_segment(sleeper, session):
    segs = [(lo, hi) for lo, hi, perm, path in maps_of(sleeper)
            if path.startswith(str(session)) and perm.startswith("rw-s") and ".frames" not in path]
    assert len(segs) == 1, segs
    lo, hi = segs[0]
    assert lo % MIB2 == 0, f"segment mapped at {lo:#x}, not at a 2 MiB boundary"
    pages = present_pages(sleeper, lo, hi)
    assert pages, "no page of the segment present"
    assert max(pages) - lo < MIB2, [hex(p - lo) for p in pages]


@pytest.mark.skipif(os.geteuid() != 0, reason="/proc/PID/pagemap's present bits need root")
def test_a_start_writes_libheisen_data_only_in_its_first_2mib(sleeper, heisen):
    lib = os.path.realpath(heisen.lib)
    maps = maps_of(sleeper)
    base = min(lo for lo, hi, perm, path in maps if path == lib)
    end = max(hi for lo, hi, perm, path in maps if path == lib)
    # the library's .bss beyond its file: the anonymous mapping right after it
    bss = [(lo, hi) for lo, hi, perm, path in maps if lo == end and path == ""]
    assert bss, "no .bss mapping after libheisen.so"
    lo, hi = bss[0]
    far = [p for p in present_pages(sleeper, lo, hi) if p - base >= MIB2]
    assert not far, [hex(p - base) for p in far]


def vdso_layout():
    """(section headers' offset, __vdso_clock_gettime's offset) of this kernel's vDSO, read from our own."""
    lo, hi = next((lo, hi) for lo, hi, perm, path in maps_of("self") if path == "[vdso]")
    with open("/proc/self/mem", "rb") as f:
        f.seek(lo)
        img = f.read(hi - lo)
    shoff, = struct.unpack_from("<Q", img, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", img, 0x3a)
    secs = [struct.unpack_from("<IIQQQQIIQQ", img, shoff + i * shentsize) for i in range(shnum)]
    clock = None
    for name, typ, flags, addr, off, size, link, info, align, entsize in secs:
        if typ != 11:  # SHT_DYNSYM
            continue
        stroff = secs[link][4]
        for k in range(size // entsize):
            st_name, st_info, st_other, st_shndx, st_value, st_size = struct.unpack_from("<IBBHQQ", img, off + k * entsize)
            end = img.index(b"\0", stroff + st_name)
            if img[stroff + st_name:end] == b"__vdso_clock_gettime":
                clock = st_value
    return shoff, clock


@pytest.mark.skipif(os.geteuid() != 0, reason="/proc/PID/pagemap's present bits need root")
def test_finding_the_vdso_clock_reads_no_page_of_the_vdso_but_its_first(sleeper):
    shoff, clock = vdso_layout()
    if shoff < 4096 or clock is None or shoff >> 12 == clock >> 12:
        pytest.skip("this kernel's vDSO has its section headers in the first page or with the clock's code")
    lo, hi = next((lo, hi) for lo, hi, perm, path in maps_of(sleeper) if path == "[vdso]")
    pages = present_pages(sleeper, lo, hi)
    assert lo + (shoff & ~4095) not in pages, [hex(p - lo) for p in pages]
