# SPDX-License-Identifier: MIT
"""The Python lock pair's code in one block at a fixed place.

A `with lock:` pair's time follows where its code lies modulo 4 KiB
against the interpreter's own hot code (10-20 ns a pair; bench/README.md
"Python lock pairs at a fixed place"), so shim/hot_bss.ld puts the pair's
functions (sem_trywait, sem_post, sem_order_acquired, hs_py_token: the
files built with -ffunction-sections, shim/meson.build) in a section of
their own, .text.hs_pair, HS_PAIR_OFFSET bytes past a 4 KiB boundary,
whatever the size of the rest of the library.  If a rename, a build flag
or a linker change left the block empty, the functions would fall back
into .text at a place that moves with every change elsewhere, and nothing
but a benchmark would tell: this test does.
"""
import re
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "shim" / "hot_bss.ld"
PAIR = ["sem_trywait", "sem_post", "sem_order_acquired", "hs_py_token"]


def pair_offset():
    m = re.search(r"^HS_PAIR_OFFSET = (0x[0-9a-fA-F]+|\d+);", SCRIPT.read_text(), re.M)
    assert m, f"no HS_PAIR_OFFSET in {SCRIPT}"
    return int(m.group(1), 0)


def test_pair_functions_fill_their_block_at_its_offset(heisen):
    sections = subprocess.run(["readelf", "-SW", str(heisen.lib)], capture_output=True, text=True,
                              check=True).stdout
    rows = [l.split("]", 1)[1].split() for l in sections.splitlines() if ".text.hs_pair" in l]
    assert len(rows) == 1, f"libheisen.so has no .text.hs_pair section:\n{sections}"
    start, size = int(rows[0][2], 16), int(rows[0][4], 16)
    assert start % 4096 == 0, hex(start)
    symbols = subprocess.run(["nm", str(heisen.lib)], capture_output=True, text=True, check=True).stdout
    addr = {}
    for line in symbols.splitlines():
        f = line.split()
        if len(f) == 3 and f[2] in PAIR and f[1] in "tT":
            addr[f[2]] = int(f[0], 16)
    assert sorted(addr) == sorted(PAIR), addr
    # in the linker script's order, the first at the chosen offset, all inside the block
    assert [addr[n] for n in PAIR] == sorted(addr.values()), {n: hex(a) for n, a in addr.items()}
    assert addr["sem_trywait"] == start + pair_offset(), (hex(addr["sem_trywait"]), hex(start))
    assert all(start <= a < start + size for a in addr.values()), (hex(start), hex(size), addr)
    # the block is the pair's code and little else: its functions' hot parts only
    assert size - pair_offset() < 4 * 4096, hex(size)
