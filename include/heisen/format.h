/* SPDX-License-Identifier: MIT */
/*
 * heisen/format.h — the on-shm segment format, ABI version 7 (HS_ABI_VERSION).
 *
 * One segment file per process image lives in the session directory as
 * "<pid>.<image>.seg" (image counts execs of that pid within the session,
 * starting at 0).  The writer is libheisen.so inside the process; readers are
 * heisen-dump and heisen-run, possibly while the writer still runs, possibly
 * after it died mid-write (SIGKILL).  This header is the whole contract: a
 * reader needs no code from the writer.  The layout self-describes (magic,
 * version, endianness tag, word size, header size, and the offset / entry size
 * / capacity of every table), in the manner of LTTng-UST's ring buffer
 * metadata; readers must validate all of it before use and must bounds-check
 * every index and offset they read (docs/design.md "Rules of the code",
 * 7 and 8).
 *
 * Concurrency rules (see docs/design.md "The flight recorder"):
 *   - Fields marked [atomic] are read and written with __atomic builtins.
 *     Tables are append-only: a writer reserves an entry, fills it, then
 *     publishes it (a release store of the table's count, or of the entry's
 *     own ready/seq word); a reader loads that word with acquire and then may
 *     read the entry.  A writer killed mid-entry leaves at most one
 *     unpublished entry behind.
 *   - Each thread slot and each ring has exactly one writer: its thread.
 *   - Index tables (hs_index_slot) are open-addressed hash tables with linear
 *     probing whose keys are never removed; key 0 means empty.
 *
 * Plain integer types only (no _Atomic, no pointers, no bitfields) so the
 * layout is the same for every compiler and for readers in other languages.
 * All sizes in bytes, all times in nanoseconds of CLOCK_MONOTONIC unless a
 * field says otherwise, all addresses are virtual addresses in the writer.
 */
#ifndef HEISEN_FORMAT_H
#define HEISEN_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#define HS_MAGIC "HEISENSG"      /* 8 bytes, no terminator stored */
#define HS_MAGIC_LEN 8
#define HS_ABI_VERSION 9u  /* 2: Python frames, GIL wait flags, thread snapshots, 64-deep stacks; 3: heap findings and counters;
				    4: processes and environment; file descriptors: fd table,
				    fd event ring, fd finding history; 5: sparse segments (HS_HDR_SPARSE),
				    cycles of any length (HS_T_CYCLE_EDGES), lock classes reuse dead lock ids,
				    semaphore locks (HS_LOCK_SEMAPHORE, HS_LOCKF_COUNTER); 6: privilege drops
				    (HS_HDR_UID_CHANGED, HS_REC_UID_CHANGED), injected faults and chaos
				    decisions (HS_REC_FAULT_INJECTED, HS_REC_CHAOS); 7: a release folded into its
				    lock's acquisition record and a loop's close into its fd's creation record
				    (HS_REC_FOLD_SHIFT: the high half of b, which an ABI 6 reader takes for the
				    lock id or generation); 8: a close folded into its generation's creation
				    event in the fd event ring (hs_fd_event.close_dt, 136 -> 152 bytes); 9: an edge
				    whose from_stack is its held lock's call site only (HS_EDGE_FROM_SITE,
				    hs_edge.from_site_n), a held entry likewise (HS_HELDF_SITE) */
#define HS_ENDIAN_TAG 0x01020304u /* reads back as 0x04030201 on a foreign-endian host */

/* Fixed shapes.  Changing any of these changes the ABI version. */
#define HS_STACK_DEPTH 64        /* frames (native PCs and Python frames) kept per stack, innermost first */
#define HS_HELD_MAX 32           /* entries in a thread's held-lock stack */
#define HS_CYCLE_MAX 16          /* edges kept inline in one potential-deadlock finding (longer: HS_T_CYCLE_EDGES) */
#define HS_CYCLE_EDGES_PER_FINDING 64 /* HS_T_CYCLE_EDGES capacity = findings * this */
#define HS_EXE_MAX 256
#define HS_ARGV_MAX 2048
#define HS_THREAD_NAME_MAX 16
#define HS_BUILD_ID_MAX 32

/* ---- table directory -------------------------------------------------- */

/* Table ids: the order of hs_header.tables[]. */
enum hs_table_id {
	HS_T_MODULES = 0,  /* struct hs_module; count [atomic] publishes */
	HS_T_STRINGS,      /* bytes (entry_size 1); count [atomic] = bytes reserved */
	HS_T_STACKS,       /* struct hs_stack; entry 0 is reserved = "no stack" */
	HS_T_STACK_INDEX,  /* struct hs_index_slot: key = stack hash, value = stack id */
	HS_T_SITE_INDEX,   /* struct hs_index_slot: key = call-site PC, value = stack id */
	HS_T_LOCKS,        /* struct hs_lock; entry 0 is reserved = "no lock" */
	HS_T_LOCK_INDEX,   /* struct hs_index_slot: key = lock address, value = lock id, aux = last generation */
	HS_T_EDGES,        /* struct hs_edge; entry 0 is reserved = "no edge" */
	HS_T_EDGE_INDEX,   /* struct hs_index_slot: key = hs_edge_key(), value = edge id */
	HS_T_THREADS,      /* struct hs_thread; count = capacity, slots are free/live/exited */
	HS_T_FINDINGS,     /* struct hs_finding; each entry has its own ready word */
	HS_T_RINGS,        /* struct hs_ring_header followed by ring_records hs_record; ring i belongs to thread slot i */
	HS_T_PYFRAMES,     /* struct hs_pyframe; entry 0 is reserved; count [atomic] publishes */
	HS_T_PYFRAME_INDEX, /* struct hs_index_slot: key = hs_pyframe_key(), value = pyframe id */
	HS_T_FDS,          /* struct hs_fd: slot i describes fd number i; count unused (capacity = numbers tracked) */
	HS_T_FD_EVENTS,    /* struct hs_fd_event: a ring of every fd creation and close, all threads (hs_header.fd_event_head) */
	HS_T_FD_HISTORY,   /* struct hs_fd_event: copies kept for fd findings (never overwritten); count [atomic] reserves */
	HS_T_CYCLE_EDGES,  /* uint64_t edge ids (entries are 8 bytes, ids fit in 32 bits) of potential-deadlock cycles longer than HS_CYCLE_MAX (hs_finding.offset
			      names the first); count reserves under the graph lock; dropped also counts cycle searches
			      cut by the writer's search depth */
	HS_T_COUNT
};

/*
 * A table: entry i lives at offset + i * entry_size, for i < capacity.
 * count is the number of entries in use (for tables whose entries are not
 * self-publishing it is the publication word: entries below count are
 * complete).  dropped counts insertions refused because the table was full;
 * a reader should say so loudly, as lockdep does.
 */
struct hs_table {
	uint64_t offset;      /* from the start of the segment */
	uint32_t entry_size;  /* bytes per entry */
	uint32_t capacity;    /* entries */
	uint32_t count;       /* [atomic] entries in use / published */
	uint32_t dropped;     /* [atomic] insertions refused: table full */
};

/* ---- header ----------------------------------------------------------- */

/* hs_header.state: low 8 bits are the state, the upper 56 bits its value. */
enum hs_state {
	HS_STATE_INIT = 0,     /* being created; not yet valid */
	HS_STATE_RUNNING = 1,  /* value unused.  Still RUNNING with the pid gone = vanished (SIGKILL, OOM) */
	HS_STATE_EXITED = 2,   /* value = exit status (0..255) */
	HS_STATE_CRASHED = 3,  /* value = signal number; a crash finding is in the table */
	HS_STATE_EXECED = 4,   /* value = the image number that replaced this one */
	HS_STATE_KILLED = 5,   /* value = signal number; written by an outside observer (heisen-run's waitpid) */
	HS_STATE_SIGNALED = 6, /* value = signal number: a signal whose default action terminates (SIGTERM, SIGINT...)
				  arrived while the program left it at SIG_DFL; the process wrote this itself, with
				  the sender in hs_header.term_* */
};
#define HS_STATE_PACK(state, value) (((uint64_t)(value) << 8) | (uint64_t)(state))
#define HS_STATE_OF(word) ((unsigned)((word) & 0xffu))
#define HS_STATE_VALUE(word) ((int64_t)((word) >> 8))

/* hs_header.python */
#define HS_PY_SEEN 0x1u            /* CPython is in the process */
#define HS_PY_FRAMES 0x2u          /* and its frames can be read (a CPython version heisen knows) */
#define HS_PY_GOT_PATCHED 0x4u     /* GIL entry points reached through GOT patching (libpython linked into the executable) */

/* hs_header.flags */
#define HS_HDR_FALLBACK_SMALL 0x1u  /* sized down because the session directory was short of space */
#define HS_HDR_SUSPECT 0x2u         /* the writer found its own state inconsistent and went quiet */
#define HS_HDR_HEAP 0x4u            /* heap checking is on in this process (HEISEN_HEAP) */
#define HS_HDR_FDS 0x8u             /* file descriptors are tracked in this process (unless HEISEN_FDS=0) */
#define HS_HDR_ENV 0x10u            /* hs_header.env was filled */
#define HS_HDR_ENV_INHERITED 0x20u  /* ... copied from the forking parent's segment, not read anew */
#define HS_HDR_SPARSE 0x40u         /* the file is sparse: tables get backing store a chunk at a time as they fill;
				       a region never committed reads as zeros, which every table reads as empty */
#define HS_HDR_OUT_OF_SPACE 0x80u   /* a table could not grow: the session directory was full (its dropped counts) */
#define HS_HDR_UID_CHANGED 0x4000u  /* it changed its uid (setuid family) to one that cannot write the session
				       directory: its later images and fork children are not recorded, and its end
				       may not be either (HS_REC_UID_CHANGED says when and to what) */

/* hs_header.heap_stacks: the stack kept for each allocation and free. */
enum hs_heap_stacks {
	HS_HEAP_STACKS_SITE = 0,    /* the call site's representative stack (exact caller; cached per site) */
	HS_HEAP_STACKS_FULL = 1,    /* a full unwind at every malloc and free (slow; HEISEN_HEAP_STACKS=full) */
	HS_HEAP_STACKS_NONE = 2,    /* none (HEISEN_HEAP_STACKS=none) */
};

/* ---- the environment a process saw ---------------------------------------- */

#define HS_KERNEL_MAX 72          /* uname's release (65 bytes with its NUL), padded */
#define HS_LIBC_MAX 24            /* gnu_get_libc_version() */
#define HS_CGROUP_PATH_MAX 256
#define HS_UNLIMITED UINT64_MAX   /* an rlimit of RLIM_INFINITY */

/* hs_env.flags */
#define HS_ENV_OOM_COUNTER 0x1u   /* the memory cgroup's OOM-kill counter could be read */
#define HS_ENV_CGROUP_ROOT 0x2u   /* /proc/self/cgroup named a path the mount does not have (a cgroup
				     namespace, or a container's own cgroup mounted at the root): the
				     controller's mount point itself was used */

/*
 * What a process could see of its machine and its limits when it started:
 * what a service sizes its pools by (the CPU count), what it may really use
 * (affinity, CFS quota, memory limit), and where the OOM killer's counter
 * is (the idea of `docker inspect` plus the cgroup files, kept where a
 * SIGKILL cannot take it away).  Written once by the process itself before
 * its segment's magic is published, read-only afterwards; a fork child
 * copies its parent's (HS_HDR_ENV_INHERITED) and reads only oom_kills anew.
 * In every number 0 means unknown or none unless the field says otherwise;
 * strings are NUL-terminated inside their arrays — a reader must check.
 */
struct hs_env {
	uint32_t cpu_online;       /* CPUs online: what sysconf(_SC_NPROCESSORS_ONLN) and Python's
				      os.cpu_count() say (/sys/devices/system/cpu/online) */
	uint32_t cpu_affinity;     /* CPUs in the affinity mask: sched_getaffinity(0) */
	uint64_t cpu_quota_us;     /* CFS bandwidth, the tightest quota/period on the cgroup path
				      (v2 cpu.max, v1 cpu.cfs_quota_us); 0 = no quota */
	uint64_t cpu_period_us;    /* its period */
	uint64_t mem_limit;        /* bytes: the tightest memory limit on the cgroup path (v2 memory.max,
				      v1 memory.limit_in_bytes); 0 = none */
	uint64_t mem_total;        /* bytes of RAM (sysinfo) */
	uint64_t shm_size;         /* bytes of the file system mounted on /dev/shm (statfs) */
	uint64_t shm_free;         /* bytes free there at start */
	uint64_t nofile_soft;      /* RLIMIT_NOFILE; HS_UNLIMITED = unlimited (so for the three below) */
	uint64_t nofile_hard;
	uint64_t as_soft;          /* RLIMIT_AS */
	uint64_t core_soft;        /* RLIMIT_CORE */
	uint64_t oom_kills;        /* at start: the OOM-kill counters of the memory cgroup and of its
				      ancestors up to the mount point, summed (v2 memory.events oom_kill,
				      v1 memory.oom_control oom_kill, kernel >= 4.13); valid with HS_ENV_OOM_COUNTER */
	uint32_t cgroup;           /* version of the memory controller's hierarchy: 0 = none found, 1, 2 */
	uint32_t flags;            /* HS_ENV_* */
	uint32_t mem_cgroup_root;  /* bytes of mem_cgroup that are the controller's mount point */
	uint32_t cgroup_ns;        /* inode of /proc/self/ns/cgroup, 0 = unknown: a reader in another
				      cgroup namespace sees other cgroups at these paths and must not
				      read them */
	char kernel[HS_KERNEL_MAX];        /* uname -r */
	char libc[HS_LIBC_MAX];            /* "2.36" */
	char mem_cgroup[HS_CGROUP_PATH_MAX]; /* the memory cgroup's directory, "" = none, e.g.
					      "/sys/fs/cgroup/memory/docker/4f1c"; readers re-read the
					      OOM-kill counter there at the end */
};

/*
 * The segment header, at offset 0.  Written once at creation except the
 * fields marked [atomic].  A reader checks, in this order: file size >=
 * sizeof(struct hs_header); magic; endian_tag; abi_version; word_size;
 * header_size; segment_size <= file size; then every table lies inside
 * segment_size with entry_size >= the reader's sizeof for that table.
 */
struct hs_header {
	char magic[HS_MAGIC_LEN];  /* HS_MAGIC */
	uint32_t abi_version;      /* HS_ABI_VERSION */
	uint32_t endian_tag;       /* HS_ENDIAN_TAG in the writer's byte order */
	uint32_t word_size;        /* sizeof(void *) of the writer */
	uint32_t header_size;      /* sizeof(struct hs_header) of the writer */
	uint64_t segment_size;     /* bytes of the segment the writer sized */
	struct hs_table tables[HS_T_COUNT];

	/* identity */
	int32_t pid;
	int32_t ppid;              /* parent at start (fork: the forking process) */
	uint32_t uid;
	uint32_t image;            /* 0 = first image of this pid in the session; +1 per exec */
	uint64_t start_ticks;      /* field 22 of /proc/pid/stat (clock ticks since boot): tells a reused pid apart */
	uint64_t start_real_ns;    /* CLOCK_REALTIME at start */
	uint64_t start_mono_ns;    /* CLOCK_MONOTONIC at start; all other *_ns fields are this clock */

	/* end of life */
	uint64_t state;            /* [atomic] HS_STATE_PACK(state, value) */
	uint64_t end_mono_ns;      /* [atomic] when state left RUNNING (0 = not yet) */

	/* geometry of the rings, repeated here for readers' convenience */
	uint32_t ring_records;     /* records per ring, a power of two */
	uint32_t flags;            /* [atomic] HS_HDR_* */

	/* counters, [atomic], monotonically increasing */
	uint64_t events;           /* unused in v1, always 0: the sum of the ring heads counts records
				      without a shared counter on the record path */
	uint64_t findings_dropped; /* findings not recorded: table full or writer suspect */

	/* the Python bridge */
	int32_t snapshot_signal;   /* the signal that makes a thread snapshot itself, 0 = not installed */
	uint32_t python;           /* HS_PY_* */
	uint64_t gil_lock;         /* [atomic] lock id of the GIL node, 0 before Python was seen */
	char python_version[32];   /* Py_GetVersion()'s first word, "" when not a Python process */

	char exe[HS_EXE_MAX];      /* /proc/self/exe, NUL-terminated, may be truncated */
	uint32_t argc;             /* arguments stored in argv[] */
	uint32_t argv_truncated;   /* 1 when argv[] could not hold them all */
	char argv[HS_ARGV_MAX];    /* argc NUL-terminated strings back to back */

	/* the heap, [atomic]; all 0 when heap checking is off (HS_HDR_HEAP clear) */
	uint64_t heap_live_bytes;  /* bytes handed out and not yet freed */
	uint64_t heap_peak_bytes;  /* high-water mark of heap_live_bytes */
	uint64_t heap_allocs;      /* allocations served */
	uint64_t heap_failures;    /* allocations the real allocator refused (NULL) */
	uint64_t heap_last_fail_size; /* size of the last refused allocation */
	uint32_t heap_last_fail_stack; /* its stack */
	uint32_t heap_stacks;      /* HS_HEAP_STACKS_*: what stack each malloc/free records */

	/* file descriptors, [atomic]; all 0 when fd tracking is off (HS_HDR_FDS clear) */
	uint64_t fd_event_head;    /* next position of the fd event ring (HS_T_FD_EVENTS): events ever written */
	uint64_t fd_created;       /* generations created (every number, tracked or not) */
	uint64_t fd_closed;        /* generations closed */
	uint32_t fd_beyond;        /* creations of numbers >= the fd table's capacity: not tracked */
	uint32_t fd_max;           /* highest fd number seen created */
	uint32_t fd_torn;          /* slot updates given up (a writer held the slot too long) */
	uint32_t fd_stacks;        /* HS_HEAP_STACKS_* values: site (default) or full, for fd creation and close stacks */
	uint64_t heap_quarantine_bytes; /* the heap's quarantine budget (HEISEN_QUARANTINE_MB, or the default
				      capped at 1/32 of the cgroup memory limit); 0 when the heap is off */
	uint64_t reserved[8];      /* zero; room for later fields without an ABI bump */
	uint64_t fd_double_closes_harmless; /* [atomic] double closes by the closing thread of a process of one
				      thread, the number not reused in between: a note, not a finding (README) */

	/* processes and environment */
	struct hs_env env;         /* at start (HS_HDR_ENV) */
	uint64_t rss_bytes;        /* [atomic] resident set at the last sample (/proc/self/statm), bytes */
	uint64_t rss_peak_bytes;   /* [atomic] the largest sample, or getrusage()'s ru_maxrss (the kernel's
				      high-water mark) when larger */
	uint64_t rss_sample_ns;    /* [atomic] when the last sample was taken; 0 = never */
	uint64_t rss_samples;      /* [atomic] samples taken */
	uint64_t oom_kills_end;    /* [atomic] env.oom_kills read again when the process exited */
	uint64_t oom_kills_end_ns; /* [atomic] when; 0 = not read (it did not exit by itself) */
	uint32_t fds_open;         /* [atomic] open descriptors at the last count (/proc/self/fd) */
	uint32_t fds_peak;         /* [atomic] the most ever counted */
	uint64_t fds_sample_ns;    /* [atomic] when they were last counted; 0 = never */
	int32_t term_signal;       /* HS_STATE_SIGNALED: the signal, written before the state word */
	int32_t term_code;         /* its si_code (SI_USER: kill(); SI_KERNEL: the terminal...) */
	int32_t term_pid;          /* the sender (si_pid), 0 when the kernel sent it */
	uint32_t term_uid;         /* and its uid */
	uint64_t reserved6[8];     /* zero */
};

/* ---- modules (for symbolization after the process is gone) ------------ */

/*
 * One loaded ELF object as dl_iterate_phdr saw it.  Appended at start and
 * after every dlopen; never removed (a dlclosed module keeps its entry so old
 * PCs still resolve).  Symbolize pc with: module whose [lo, hi) contains pc,
 * then the ELF file at path loaded with bias `base` (pc - base is the
 * address in the file's own terms).
 */
struct hs_module {
	uint64_t base;             /* load bias, dlpi_addr */
	uint64_t lo, hi;           /* lowest and highest+1 address of its PT_LOAD segments */
	uint32_t path;             /* offset into the strings table; NUL-terminated; exe for the main program */
	uint16_t path_len;         /* without the NUL */
	uint8_t build_id_len;      /* 0 when the object has no NT_GNU_BUILD_ID */
	uint8_t flags;             /* HS_MOD_* */
	uint8_t build_id[HS_BUILD_ID_MAX];
};
#define HS_MOD_MAIN 0x1u    /* the main executable */
#define HS_MOD_DLOPEN 0x2u  /* appeared after a dlopen */

/* ---- stacks ------------------------------------------------------------ */

/*
 * A Python frame: a pc[] entry of a stack with HS_PC_PYTHON set is not an
 * address but HS_PC_PYTHON | pyframe id.  Python frames stand where the
 * interpreter's native frame (_PyEval_EvalFrameDefault) that ran them
 * stood, so native and Python frames interleave in call order (py-spy's
 * and memray's "native mode").
 */
#define HS_PC_PYTHON (1ull << 63)
#define HS_PC_IS_PYTHON(pc) (((pc) & HS_PC_PYTHON) != 0)
#define HS_PC_PYFRAME(pc) ((uint32_t)((pc) & 0xffffffffu))

/*
 * One Python frame: a code object at one line, with its names interned in
 * the strings table when first seen.  Deduplicated through the pyframe index
 * by (code, line); code/name_ptr/file_ptr are the writer's object addresses,
 * kept only to tell a reused code-object address apart.
 */
struct hs_pyframe {
	uint64_t code;             /* PyCodeObject * */
	uint64_t name_ptr;         /* its co_qualname (or co_name) object */
	uint64_t file_ptr;         /* its co_filename object */
	uint32_t function;         /* strings offset: qualified name, e.g. "Worker.run" */
	uint32_t file;             /* strings offset: co_filename */
	int32_t line;              /* 1-based, 0 = unknown */
	uint32_t ready;            /* [atomic] 1 once the entry is complete */
};

static inline uint64_t hs_pyframe_key(uint64_t code, int32_t line)
{
	uint64_t k = (code * 0x9e3779b97f4a7c15ull) ^ (uint64_t)(uint32_t)line;
	return k ? k : 1;
}

/*
 * A deduplicated call stack: depth PCs, innermost first.  pc[0] is the
 * address of the instruction that was executing (a crash) or the return
 * address into the caller of the hooked function; every other pc[i] is a
 * return address, so symbolize pc[i] - 1 for i > 0 (and for i == 0 unless
 * HS_STACK_EXACT_TOP).  Published by hs_index_slot.value (stack index) and by
 * the ready word.
 */
struct hs_stack {
	uint64_t hash;             /* of depth and pc[], 0 never used */
	uint32_t ready;            /* [atomic] 1 when pc[] is complete */
	uint16_t depth;            /* valid entries in pc[] */
	uint16_t flags;            /* HS_STACK_* */
	uint64_t pc[HS_STACK_DEPTH];
};
#define HS_STACK_TRUNCATED 0x1u  /* the real stack was deeper */
#define HS_STACK_EXACT_TOP 0x2u  /* pc[0] is a faulting PC, not a return address */
#define HS_STACK_SITE 0x4u       /* captured the first time this call site was seen: pc[0] is exact, callers are representative */
#define HS_STACK_PYTHON 0x8u     /* some pc[] are Python frames (HS_PC_PYTHON) */

/* Open-addressed hash slot used by every *_INDEX table. */
struct hs_index_slot {
	uint64_t key;              /* [atomic] 0 = empty; published last with release */
	uint32_t value;            /* [atomic] id in the table it indexes (0 = not yet / none) */
	uint32_t aux;              /* table-specific (lock index: last generation used at this address) */
};

/* ---- locks and the lock-order graph ------------------------------------ */

enum hs_lock_kind {
	HS_LOCK_MUTEX = 1,
	HS_LOCK_RWLOCK = 2,
	HS_LOCK_SPIN = 3,
	HS_LOCK_GIL = 4,           /* CPython's GIL, one node per interpreter */
	HS_LOCK_SEMAPHORE = 5,     /* a POSIX semaphore used as a lock (threading.Lock); first_stack: where sem_init ran */
};
#define HS_LOCKF_RECURSIVE 0x1u    /* PTHREAD_MUTEX_RECURSIVE */
#define HS_LOCKF_ERRORCHECK 0x2u   /* PTHREAD_MUTEX_ERRORCHECK */
#define HS_LOCKF_WRITER_PREF 0x4u  /* rwlock that prefers writers: reads can block behind a waiting writer */
#define HS_LOCKF_DEAD 0x8u         /* [atomic] destroyed; a new acquisition at addr makes a new lock with gen+1 */
#define HS_LOCKF_SHARED 0x10u      /* [atomic] this instance was acquired by two different threads (last_tid changed) */
#define HS_LOCKF_COUNTER 0x20u     /* [atomic] semaphore used as a counter (initial value != 1, posted by a
                                    * non-holder, waited on by its holder): not a lock, never in a finding */

/*
 * Acquisition modes.  A thread waiting to acquire lock L in mode `acq` can be
 * blocked by another thread holding L in mode `hold` unless acq ==
 * HS_MODE_READ_RECURSIVE and hold is a read mode (lockdep's recursive-read
 * rule; glibc's default rwlock prefers readers, so its rdlock is recursive).
 */
enum hs_mode {
	HS_MODE_WRITE = 0,           /* exclusive: mutex, spin, wrlock */
	HS_MODE_READ = 1,            /* shared, may queue behind a writer (writer-preferring rwlock) */
	HS_MODE_READ_RECURSIVE = 2,  /* shared, never queues behind a waiting writer */
};

/*
 * A lock, identified by (addr, gen): gen starts at 1 and grows each time the
 * lock at addr is destroyed and a new one is used there.  Lock id 0 is
 * reserved.
 */
struct hs_lock {
	uint64_t addr;
	uint32_t gen;
	uint16_t kind;             /* enum hs_lock_kind */
	uint16_t flags;            /* HS_LOCKF_* [atomic] */
	uint32_t first_stack;      /* stack of its first acquisition */
	int32_t first_tid;
	uint32_t name;             /* strings offset of a name given by heisen_name_lock(), 0 = none */
	uint32_t first_out;        /* writer-internal: first edge id out of this lock (adjacency list) */
	uint64_t first_ns;         /* time of first acquisition */
	int32_t last_tid;          /* [atomic] the thread that acquired it last (this instance), 0 = none yet;
				      no longer written once the instance is HS_LOCKF_SHARED */
	uint32_t reserved;
};

/*
 * An edge A -> B of the lock-order graph: some thread acquired B (blocking,
 * in mode to_mode) while holding A (in mode from_mode).  Stored once per
 * (from, to, from_mode, to_mode), with the stacks of that first occurrence:
 * from_stack is where A was acquired, to_stack where B was.  Edge id 0 is
 * reserved.
 */
struct hs_edge {
	uint32_t from, to;         /* lock ids */
	uint8_t from_mode;         /* enum hs_mode: how A was held */
	uint8_t to_mode;           /* enum hs_mode: how B was acquired */
	uint16_t flags;            /* HS_EDGE_* */
	uint32_t from_stack;
	uint32_t to_stack;
	int32_t tid;               /* the thread that made the edge */
	uint32_t next_out;         /* writer-internal: next edge id with the same `from` */
	uint32_t from_site_n;      /* HS_EDGE_FROM_SITE: the times A had been taken with nothing nested
				      under it before (at least); 0: from_stack is exact */
	uint64_t ts_ns;            /* when it was first seen */
};
#define HS_EDGE_IN_CYCLE 0x1u      /* [atomic] part of a reported potential-deadlock cycle */
#define HS_EDGE_FROM_SITE 0x2u     /* [atomic] from_stack is the stack of A's call site only (the first
				      acquisition there), not this holding's: A had been a leaf so far */

/* The edge index key.  Lock ids fit in 28 bits (capacities are far below). */
static inline uint64_t hs_edge_key(uint32_t from, uint32_t to, unsigned from_mode, unsigned to_mode)
{
	return ((uint64_t)(from & 0x0fffffffu) << 36) | ((uint64_t)(to & 0x0fffffffu) << 8) |
	       ((uint64_t)(from_mode & 3u) << 4) | ((uint64_t)(to_mode & 3u) << 2) | 1u;
}

/* ---- threads ------------------------------------------------------------ */

enum hs_thread_state {
	HS_THREAD_FREE = 0,
	HS_THREAD_LIVE = 1,
	HS_THREAD_EXITED = 2,      /* kept for the dumper until the slot is needed again */
};

enum hs_wait_kind {
	HS_WAIT_NONE = 0,
	HS_WAIT_LOCK = 1,          /* wait_lock/wait_addr: a mutex, rwlock or spin lock */
	HS_WAIT_COND = 2,          /* wait_addr: the condition variable; wait_lock: its mutex (released while waiting) */
	HS_WAIT_GIL = 3,           /* the GIL */
};

#define HS_HELDF_GIL 0x1u          /* the thread held the GIL when it took this lock */
#define HS_HELDF_SITE 0x2u         /* stack is the call site's stack only: taken on the leaf path (a lock
				      never held while another was taken, docs/design.md "Lock order") */
#define HS_HELDF_RELGEN_SHIFT 16   /* flags bits 16..31 (writer-internal): the lock's count of releases by
				      threads that did not hold it, when taken; another count means released */

/* One entry of a held-lock stack, outermost first. */
struct hs_held {
	uint64_t addr;             /* the lock's address */
	uint32_t lock;             /* lock id */
	uint8_t mode;              /* enum hs_mode it is held in */
	uint8_t trylock;           /* 1 when taken by a trylock */
	uint16_t recursion;        /* extra re-entries of a recursive mutex */
	uint32_t stack;            /* acquisition stack */
	uint32_t flags;            /* HS_HELDF_* */
	uint64_t since_ns;         /* when it was acquired */
};

/*
 * A thread slot.  Its thread writes it; anyone may read it.  The lock state
 * (held[], held_count and the wait_* words) is guarded by a seqlock: the
 * writer makes lock_seq odd, changes the fields, makes it even again (release).
 * One change is made outside it: the release of the top held entry lowers
 * held_count by one store (no entry changes; the next push, under the
 * seqlock, is what rewrites that entry), so a copy that sees either count
 * is a stack the thread had.
 * A reader copies the fields between two equal even reads of lock_seq;
 * after a few failed tries it may use a torn copy but must say so.
 */
struct hs_thread {
	uint32_t state;            /* [atomic] enum hs_thread_state */
	int32_t tid;
	char name[HS_THREAD_NAME_MAX];
	uint64_t start_ns;
	uint64_t end_ns;           /* when it exited, 0 while live */
	uint32_t generation;       /* times this slot has been (re)used */
	uint32_t held_overflow;    /* locks held beyond HS_HELD_MAX (not tracked) */

	uint64_t lock_seq;         /* [atomic] seqlock over the fields below */
	uint32_t held_count;
	uint32_t wait_kind;        /* enum hs_wait_kind */
	uint64_t wait_addr;        /* the lock (or condition variable) waited for */
	uint32_t wait_lock;        /* lock id waited for (cond: its mutex) */
	uint8_t wait_mode;         /* enum hs_mode */
	uint8_t wait_flags;        /* HS_WAITF_* */
	uint8_t pad[2];
	uint32_t wait_stack;       /* where it waits */
	uint32_t pad2;
	uint64_t wait_since_ns;
	struct hs_held held[HS_HELD_MAX];

	/*
	 * The last snapshot of this thread's stack (native and Python), taken
	 * in the thread itself by the snapshot signal (HS_SNAPSHOT_SIGNAL) that
	 * a hang watcher sends to every thread, or by the crash handler for the
	 * other threads of a crashing process.  Written stack first, then
	 * snap_ns with release; a reader wanting a fresh one compares snap_ns
	 * with the time of its request.
	 */
	uint64_t snap_ns;          /* [atomic] CLOCK_MONOTONIC when taken, 0 = never */
	uint32_t snap_stack;       /* stack id */
	uint32_t snap_flags;       /* HS_SNAPF_* */
};

#define HS_WAITF_HOLDS_GIL 0x1u     /* the waiting thread holds the GIL */
#define HS_SNAPF_CRASH 0x1u         /* taken because another thread crashed */
#define HS_SNAPF_REQUESTED 0x2u     /* taken for an outside request (hang) */
#define HS_SNAPF_HOLDS_GIL 0x4u     /* the thread held the GIL when it took the snapshot */

/*
 * The signal a hang watcher (heisen-run, heisen-dump --snapshot) sends with
 * tgkill to every thread of a process to make it record its own stack:
 * there is no ptrace in most containers.  SIGRTMAX - 3 by default; the
 * process says which it uses in hs_header.snapshot_signal (0 = none).
 */
#define HS_SNAPSHOT_SIGNAL_OFFSET 3 /* from SIGRTMAX */
/* A request is sent with rt_tgsigqueueinfo, si_code SI_QUEUE and this
 * si_value, so the program's own use of the signal is told apart. */
#define HS_SNAPSHOT_MAGIC 0x6865697365ll

/* ---- rings (the flight recorder) ---------------------------------------- */

enum hs_record_type {
	HS_REC_NONE = 0,
	HS_REC_THREAD_START = 1,   /* a = tid, b = slot generation */
	HS_REC_THREAD_EXIT = 2,    /* a = tid */
	HS_REC_LOCK_ACQUIRED = 3,  /* a = lock address, b = lock id | folded release << 32 (HS_REC_FOLD_SHIFT),
				      c = mode | trylock << 8 | waited_ns << 16 */
	HS_REC_LOCK_BUSY = 4,      /* a trylock that failed: a = address, b = lock id */
	HS_REC_LOCK_RELEASED = 5,  /* a = address, b = lock id */
	HS_REC_LOCK_DESTROYED = 6, /* a = address, b = lock id */
	HS_REC_COND_WAIT = 7,      /* a = condition variable, b = mutex address */
	HS_REC_COND_WOKE = 8,      /* a = condition variable, b = mutex address, c = result (0 / ETIMEDOUT) */
	HS_REC_NEW_EDGE = 9,       /* a = edge id */
	HS_REC_FINDING = 10,       /* a = finding index */
	HS_REC_FORK = 11,          /* a = child pid (recorded in the parent) */
	HS_REC_DLOPEN = 12,        /* a = strings offset of the path, b = 1 on success */
	HS_REC_SIGNAL = 13,        /* a = signal, b = fault address */
	HS_REC_EXIT = 14,          /* a = status */
	HS_REC_LOCK_ERROR = 15,    /* the real call failed: a = address, b = lock id, c = errno value */
	HS_REC_GIL_WAIT = 16,      /* about to take the GIL through an entry point: a = which (enum hs_gil_entry) */
	HS_REC_GIL_ACQUIRED = 17,  /* a = which, c = waited ns (0: the coarse clock did not move during the wait, then ts_ns is the wait's start; shim/python.c) */
	HS_REC_GIL_RELEASED = 18,  /* a = which */
	HS_REC_SNAPSHOT = 19,      /* this thread recorded its stack: a = HS_SNAPF_* */
	/* file descriptors: 20..29; stack = the creation or close stack */
	HS_REC_FD_CREATED = 20,    /* a = fd, b = generation | folded close << 32 (HS_REC_FOLD_SHIFT),
				      c = kind | call << 8 (enum hs_fd_kind, hs_fd_call)
				      | folded close's call << 16 | its stack << 32 */
	HS_REC_FD_CLOSED = 21,     /* a = fd, b = generation closed, c = call (enum hs_fd_call) */
	HS_REC_FD_CLOSE_FAILED = 22, /* a close that failed: a = fd, b = generation, c = errno | call << 16 */
	/* 30..39 */
	HS_REC_MEMORY = 30,        /* a memory sample: a = RSS bytes, b = heap live bytes (0: heap checker off),
				      c = HS_MEMW_* | the size of the allocation that triggered it << 8 */
	HS_REC_TERM_SIGNAL = 31,   /* a terminating signal arrived at SIG_DFL: a = signal, b = sender pid,
				      c = si_code; the process dies of it next */
	HS_REC_UID_CHANGED = 32,   /* a privilege drop (HS_HDR_UID_CHANGED): a = real uid, b = effective uid
				      after it, c = the errno of the session directory's access check */
	/* reproducing failures (heisen-run --fail, --heap-limit, --chaos): 40..49 */
	HS_REC_FAULT_INJECTED = 40, /* a call heisen made fail: a = enum hs_fault_call, b = the call's size (malloc)
				       or fd (close), 0 for open, c = errno | the thread's count of such calls << 16;
				       stack = the failing call's stack */
	HS_REC_CHAOS = 41,          /* a chaos decision that did something: a = enum hs_chaos_point,
				       b = enum hs_chaos_action, c = nanoseconds slept or the CPU moved to |
				       the thread's chaos point count << 32 */
};

/* Which call an HS_REC_FAULT_INJECTED record made fail (shim/faults.c). */
enum hs_fault_call {
	HS_FAULT_MALLOC = 1,     /* malloc, calloc or realloc: --fail malloc, --fail-after */
	HS_FAULT_OPEN = 2,       /* open, openat, creat and their variants */
	HS_FAULT_CLOSE = 3,      /* close (the number is released all the same) */
	HS_FAULT_HEAP_LIMIT = 4, /* an allocation past --heap-limit; b = its size */
};

/* Where a chaos decision was taken and what it did (HS_REC_CHAOS; shim/chaos.c). */
enum hs_chaos_point {
	HS_CHAOS_LOCK = 1,       /* just after a lock was taken (mutex, rwlock, spin): held longer */
	HS_CHAOS_UNLOCK = 2,     /* after a lock is released */
	HS_CHAOS_GIL_TAKE = 3,   /* before the GIL is taken through an entry point */
	HS_CHAOS_GIL_DROP = 4,   /* after the GIL is released */
	HS_CHAOS_THREAD = 5,     /* a new thread, before its start routine */
	HS_CHAOS_MALLOC = 6,     /* before malloc/calloc/realloc */
	HS_CHAOS_FREE = 7,       /* before free */
	HS_CHAOS_CLOSE = 8,      /* before close */
};
enum hs_chaos_action {
	HS_CHAOS_YIELD = 1,      /* sched_yield */
	HS_CHAOS_SLEEP = 2,      /* nanosleep, c = ns */
	HS_CHAOS_MIGRATE = 3,    /* sched_setaffinity to one CPU, c = the CPU */
};

/* Why a memory sample was taken (low byte of HS_REC_MEMORY's c). */
enum hs_mem_why {
	HS_MEMW_START = 1,         /* the process (or fork child) started */
	HS_MEMW_TIME = 2,          /* an event was recorded and the last sample was older than the interval */
	HS_MEMW_ALLOC = 3,         /* large allocations (malloc, mmap...) added up since the last sample */
	HS_MEMW_EXIT = 4,          /* exit, _exit */
	HS_MEMW_SIGNAL = 5,        /* a crash or a terminating signal */
};

/* The CPython entry points through which native code takes and drops the GIL. */
enum hs_gil_entry {
	HS_GIL_ENSURE = 1,         /* PyGILState_Ensure */
	HS_GIL_RELEASE = 2,        /* PyGILState_Release */
	HS_GIL_SAVE = 3,           /* PyEval_SaveThread (Py_BEGIN_ALLOW_THREADS) */
	HS_GIL_RESTORE = 4,        /* PyEval_RestoreThread (Py_END_ALLOW_THREADS) */
	HS_GIL_ACQUIRE_THREAD = 5, /* PyEval_AcquireThread */
	HS_GIL_RELEASE_THREAD = 6, /* PyEval_ReleaseThread */
};

/*
 * A release folded into its acquisition's record (HS_REC_LOCK_ACQUIRED's b,
 * whose low 32 bits are the lock id): b >> HS_REC_FOLD_SHIFT is 0 when the
 * record is a plain acquisition, else the lock was released at ts_ns +
 * (b >> HS_REC_FOLD_SHIFT) - 1, by the same clock (the release's time as an
 * HS_REC_LOCK_RELEASED record would have carried it).  The writer folds only
 * a release that comes right after the acquisition in its thread's ring (no
 * record of the thread in between, the same lock) and whose time is at most
 * HS_REC_FOLD_MAX_NS after it; any other release is a record of its own.
 * The fold is one aligned 64-bit store to b, seq untouched: a concurrent
 * reader copies either the plain or the folded form, never a mix, and one
 * that reads b atomically needs nothing more (dumper/snapshot.c expands a
 * folded record into the two events).  A process killed between the two
 * leaves the plain acquisition.  Segments written before the fold have b's
 * high bits 0 (a lock id is 32 bits): they read as before.  The idea is the
 * "duration" event of tracers that coalesce a short begin/end pair
 * (docs/design.md "Rings").
 */
#define HS_REC_FOLD_SHIFT 32
#define HS_REC_FOLD_MAX_NS 0xfffffffeull /* ~4.29 s: a longer hold is a record of its own */

/*
 * A close folded into its generation's creation record the same way
 * (HS_REC_FD_CREATED, whose b's low 32 bits are the generation): b >>
 * HS_REC_FOLD_SHIFT is 0 for a plain creation, else the generation was
 * closed at ts_ns + (b >> HS_REC_FOLD_SHIFT) - 1 by call (c >> 16) & 0xff
 * with stack c >> 32 (the HS_REC_FD_CLOSED record it stands for).  Only a
 * close that comes right after the creation in its thread's ring (no
 * record of the thread in between, the same number and generation), at
 * most HS_REC_FOLD_MAX_NS after it, is folded: a loop's open and close.
 * The writer stores c first, then b (release); a reader loads b first
 * (acquire), then the rest: a folded b comes with its close's c.  A plain
 * b with c's high bits set is a fold caught half-way: read as the plain
 * creation (c & 0xffff).  Segments written before have b's and c's high
 * bits 0 (docs/design.md "File descriptors").
 */
#define HS_REC_FD_FOLD_CALL_SHIFT 16
#define HS_REC_FD_FOLD_STACK_SHIFT 32

/*
 * A ring record.  Publication protocol (a seqlock per record): the writer
 * stores seq = 0, a release fence, the payload, then seq = pos + 1 with
 * release, where pos is the record's absolute position (head before the
 * write).  A reader for position pos accepts the record only if seq ==
 * pos + 1 both before (acquire) and after (after an acquire fence) copying
 * the payload; anything else is an overwritten or torn record and is skipped.
 */
struct hs_record {
	uint64_t seq;              /* [atomic] */
	uint64_t ts_ns;
	uint32_t type;             /* enum hs_record_type */
	uint32_t stack;            /* stack id, 0 = none */
	uint64_t a, b, c;          /* payload, by type */
};

/*
 * The head of ring i, followed by hs_header.ring_records records.  Records
 * with positions in [max(0, head - ring_records), head) may be valid; the
 * writer overwrote head - ring_records older ones (flight-recorder mode).
 * A ring follows its thread slot: when the slot is reused the ring goes on,
 * and a HS_REC_THREAD_START record marks where the new thread begins.
 */
struct hs_ring_header {
	uint64_t head;             /* [atomic] next position to write */
	int32_t tid;               /* current owner */
	uint32_t slot;             /* its thread slot */
	uint64_t pad[6];           /* to 64 bytes: the records start on a cache line */
};

/* ---- findings ----------------------------------------------------------- */

enum hs_finding_kind {
	HS_FIND_POTENTIAL_DEADLOCK = 1, /* a cycle in the lock-order graph: edges[0..n) */
	HS_FIND_SELF_DEADLOCK = 2,      /* relocking a held non-recursive lock: lock, stack (now), stack2 (first acquisition; offset != 0: its site's only) */
	HS_FIND_CRASH = 3,              /* signo, si_code, addr, stack (the faulting thread) */
	HS_FIND_DOUBLE_FREE = 4,        /* addr, size; stack = the second free (tid), stack2 = the first (tid2), stack3 = the allocation (tid3) */
	HS_FIND_INVALID_FREE = 5,       /* addr: never handed out, or the middle of a block; stack = the free (tid) */
	HS_FIND_HEAP_OVERFLOW = 6,      /* addr, size: the tail canary broken; stack = the free (tid), stack3 = the allocation (tid3) */
	HS_FIND_DOUBLE_CLOSE = 7,       /* a close that failed with EBADF; see "fd findings" below */
	HS_FIND_STALE_CLOSE = 8,        /* a close of a generation its caller did not own; see "fd findings" below */
	HS_FIND_USE_AFTER_FREE = 9,     /* a sampled guard-page block read or written after its free; see "guard findings" below */
	HS_FIND_HEAP_BUFFER_OVERFLOW = 10, /* an access to the guard page next to a sampled block; see "guard findings" below */
};

/*
 * A finding recorded by the writer.  Entries are reserved by a fetch-add on
 * tables[HS_T_FINDINGS].count and published by ready = 1 (release); a reader
 * skips entries whose ready word is not 1.
 */
struct hs_finding {
	uint32_t ready;            /* [atomic] */
	uint16_t kind;             /* enum hs_finding_kind */
	uint16_t n;                /* edges used in edges[] */
	int32_t tid;               /* the thread that made it happen */
	uint32_t count;            /* [atomic] times seen (duplicates fold into the first) */
	uint64_t ts_ns;
	uint32_t stack;            /* main stack (crash: faulting; self-deadlock: the relock) */
	uint32_t stack2;           /* second stack (self-deadlock: the first acquisition) */
	uint32_t lock;             /* lock id (self-deadlock) */
	int32_t signo;             /* crash */
	int32_t si_code;           /* crash */
	uint32_t access;           /* guard findings: enum hs_access (was padding: 0 in every other kind) */
	uint64_t addr;             /* crash: fault address; self-deadlock: lock address */
	uint32_t edges[HS_CYCLE_MAX]; /* potential deadlock: the cycle, edges[i].to == edges[i+1].from; when
					 n > HS_CYCLE_MAX the whole cycle is HS_T_CYCLE_EDGES[offset .. offset + n)
					 (and edges[] holds its first HS_CYCLE_MAX) */
	/* heap findings (ABI 3) */
	uint32_t stack3;           /* the allocation's stack */
	int32_t tid2;              /* the first free's thread */
	int32_t tid3;              /* the allocating thread */
	uint32_t offset;           /* self-deadlock: 0, or stack2 is the held entry's call site's stack only
				      (taken on the leaf path, HS_HELDF_SITE) and this is the lock's count of
				      acquisitions with nothing nested before, at least 1 (as hs_edge.from_site_n);
				      invalid free inside a block: addr - offset is the block's start;
				      heap-overflow: 0 found at the block's own free, else addr + offset is the
				      next block, whose chunk header the overflow reached, found at its release */
	uint64_t size;             /* the block's size as requested */
};

/*
 * fd findings (ABI 4) use the fields of struct hs_finding this way:
 *   addr    the fd number
 *   size    the generation concerned (double-close: the one closed twice;
 *           stale-close: the rightful owner's generation that was closed)
 *   lock    index of the finding's first event in HS_T_FD_HISTORY
 *   n       events used there (at most HS_FD_FINDING_EVENTS, reserved
 *           together; [atomic]: a later event, the rightful owner's EBADF,
 *           may be appended to a stale-close after it was published)
 *   offset  enum hs_fd_rule: how the finding was proven
 *   signo   errno of the failing close (EBADF), 0 when none failed
 *   double-close:  stack/tid = the failing close, stack2/tid2 = the earlier
 *                  close of that generation, stack3/tid3 = its creation
 *   stale-close:   stack/tid = the stale close, stack2/tid2 = where the stale
 *                  closer got the number (its own earlier generation's
 *                  creation or claim), stack3/tid3 = the rightful owner's
 *                  creation
 */
/*
 * Guard findings (sampled guard-page allocations, GWP-ASan's technique: one
 * allocation in HEISEN_GUARD_RATE gets a page of its own between two
 * inaccessible pages, and the page itself becomes inaccessible when it is
 * freed; the fault is the finding) use the fields of struct hs_finding so:
 *   addr    the address the faulting instruction touched (si_addr)
 *   size    the block's size as requested
 *   offset  addr - the block's start, a two's-complement int32_t: negative
 *           = before the block (underflow), >= size = past its end
 *           (overflow), else inside it (use-after-free)
 *   access  enum hs_access: read or write, from the page-fault error code
 *   signo, si_code  the signal (SIGSEGV, SIGBUS) and its code
 *   stack/tid     the access (faulting thread, HS_STACK_EXACT_TOP)
 *   stack2/tid2   the block's free (0: not freed, an overflow of a live block)
 *   stack3/tid3   the block's allocation
 * A double free of a sampled block is HS_FIND_DOUBLE_FREE with the heap
 * checker's fields (stack = second free, stack2 = first, stack3 = allocation).
 */
enum hs_access {
	HS_ACCESS_UNKNOWN = 0,
	HS_ACCESS_READ = 1,
	HS_ACCESS_WRITE = 2,
};

enum hs_fd_rule {
	HS_FD_RULE_EBADF = 1,      /* double-close: the close failed with EBADF after a recorded close */
	HS_FD_RULE_FILE = 2,       /* stale-close: fclose/freopen of a FILE whose generation is not the number's current one */
	HS_FD_RULE_DIR = 3,        /* stale-close: closedir of a DIR whose generation is not the number's current one */
	HS_FD_RULE_OWNER = 4,      /* stale-close: a close that does not match heisen_fd_set_owner()'s owner */
	HS_FD_RULE_CONFIRMED = 5,  /* stale-close: the rightful owner's own close then failed with EBADF (README: the rule) */
	HS_FD_RULE_FILENO = 6,     /* stale-close: a plain close() of a number a FILE owns (close(fileno(f)), bionic fdsan) */
	HS_FD_RULE_DIRFD = 7,      /* stale-close: a plain close() of a number a DIR owns (close(dirfd(d))) */
	HS_FD_RULE_SAME_SITES = 8, /* stale-close in one thread: the owner's close failed with EBADF; generation g
				      was ended by a close at the owner's close site, g - 1 created at the owner's
				      creation site and closed elsewhere (README: the rule) */
};
#define HS_FD_FINDING_EVENTS 8     /* history events reserved per fd finding */

/* ---- file descriptors --------------------------------------------------- */

/* What an fd is. */
enum hs_fd_kind {
	HS_FDK_UNKNOWN = 0,        /* inherited, or created where heisen could not see how */
	HS_FDK_FILE = 1,           /* open/openat/creat/fopen: a path */
	HS_FDK_DIR = 2,            /* opendir */
	HS_FDK_SOCKET = 3,
	HS_FDK_PIPE = 4,
	HS_FDK_EVENTFD = 5,
	HS_FDK_TIMERFD = 6,
	HS_FDK_SIGNALFD = 7,
	HS_FDK_EPOLL = 8,
	HS_FDK_INOTIFY = 9,
	HS_FDK_MEMFD = 10,
	HS_FDK_RECEIVED = 11,      /* received with SCM_RIGHTS */
	HS_FDK_COUNT
};

/* The call that created or closed a generation. */
enum hs_fd_call {
	HS_FDC_NONE = 0,
	HS_FDC_OPEN = 1,           /* open, open64, __open_2 ... */
	HS_FDC_OPENAT = 2,
	HS_FDC_CREAT = 3,
	HS_FDC_SOCKET = 4,
	HS_FDC_SOCKETPAIR = 5,
	HS_FDC_ACCEPT = 6,         /* accept, accept4 */
	HS_FDC_PIPE = 7,           /* pipe, pipe2 */
	HS_FDC_DUP = 8,
	HS_FDC_DUP2 = 9,           /* dup2: creates the new number, closes what it held */
	HS_FDC_DUP3 = 10,
	HS_FDC_FCNTL_DUPFD = 11,   /* F_DUPFD, F_DUPFD_CLOEXEC */
	HS_FDC_EVENTFD = 12,
	HS_FDC_TIMERFD = 13,
	HS_FDC_SIGNALFD = 14,
	HS_FDC_EPOLL = 15,         /* epoll_create, epoll_create1 */
	HS_FDC_INOTIFY = 16,       /* inotify_init, inotify_init1 */
	HS_FDC_MEMFD = 17,
	HS_FDC_FOPEN = 18,         /* fopen, fopen64 */
	HS_FDC_FDOPEN = 19,        /* takes over an open number: an owner event */
	HS_FDC_FREOPEN = 20,       /* closes the FILE's number, opens another */
	HS_FDC_OPENDIR = 21,
	HS_FDC_FDOPENDIR = 22,     /* takes over an open number: an owner event */
	HS_FDC_RECVMSG = 23,       /* SCM_RIGHTS */
	HS_FDC_INHERITED = 24,     /* open when the process image started (parent, exec) or at fork */
	HS_FDC_UNSEEN = 25,        /* found open at its close or its annotation: created where heisen does not look */
	HS_FDC_CLOSE = 26,
	HS_FDC_CLOSE_RANGE = 27,   /* close_range, closefrom */
	HS_FDC_FCLOSE = 28,
	HS_FDC_CLOSEDIR = 29,
	HS_FDC_CLOSE_OWNED = 30,   /* heisen_fd_close_owned */
	HS_FDC_SET_OWNER = 31,     /* heisen_fd_set_owner: an owner event */
	HS_FDC_GONE = 32,          /* found closed at exit by the kernel's word (fcntl F_GETFD: EBADF): closed
				      where heisen does not look (syscall(SYS_close), a raw system call) */
	HS_FDC_COUNT
};

/* hs_fd.state */
enum hs_fd_state {
	HS_FDS_NONE = 0,           /* never seen */
	HS_FDS_OPEN = 1,           /* generation gen is open */
	HS_FDS_CLOSED = 2,         /* generation gen was closed (close_*) */
};

/* hs_fd.flags and hs_fd_event.flags */
#define HS_FDF_CLOEXEC 0x1u        /* close-on-exec (O_CLOEXEC, SOCK_CLOEXEC, F_SETFD ...) */
#define HS_FDF_INHERITED 0x2u      /* open before this image started (parent, exec) or at fork: not created here */
#define HS_FDF_OWNER_FILE 0x4u     /* owner is a FILE * (fopen, fdopen, freopen) */
#define HS_FDF_OWNER_DIR 0x8u      /* owner is a DIR * (opendir, fdopendir) */
#define HS_FDF_OWNER_TAG 0x10u     /* owner is a tag given by heisen_fd_set_owner */
#define HS_FDF_UNSEEN 0x20u        /* heisen did not see this generation's creation */
#define HS_FDF_OWNERS (HS_FDF_OWNER_FILE | HS_FDF_OWNER_DIR | HS_FDF_OWNER_TAG)

#define HS_FD_PATH_MAX 80          /* bytes kept of a path or peer, NUL included: the tail when longer */

/*
 * Slot i of HS_T_FDS: fd number i, its current (or last) generation.  The
 * generation grows by one at every creation of the number; each generation
 * remembers its creation (call, kind, path or peer, stack, thread) and, once
 * closed, its close.  Several threads may write one slot (the kernel
 * serializes the system calls, not the hooks around them), so the slot is a
 * seqlock: a writer claims it by moving seq from even to odd with a
 * compare-and-swap, writes, and stores seq + 1 (release); a reader copies
 * between two equal even reads of seq.  A creation is recorded after the
 * call returns, a close before the call is made (the number can be reused
 * by another thread the instant it is closed).  Numbers beyond the table's
 * capacity (HEISEN_FD_NUMBERS, default 1024) are counted in
 * hs_header.fd_beyond, not tracked.  The idea is
 * Android's fdsan (owner tags), generalized to untagged numbers.
 */
struct hs_fd {
	uint32_t seq;              /* [atomic] the slot's seqlock */
	uint32_t gen;              /* current or last generation, 0 = never seen */
	uint8_t state;             /* enum hs_fd_state */
	uint8_t kind;              /* enum hs_fd_kind */
	uint8_t call;              /* enum hs_fd_call: how it was created */
	uint8_t close_call;        /* enum hs_fd_call: how it was closed (state CLOSED) */
	uint32_t flags;            /* HS_FDF_* */
	int32_t tid;               /* creating thread */
	uint32_t stack;            /* creation stack */
	uint64_t ts_ns;            /* creation time */
	uint64_t owner;            /* FILE *, DIR * or owner tag (HS_FDF_OWNER_*), 0 = none */
	int32_t close_tid;         /* closing thread (state CLOSED) */
	uint32_t close_stack;
	uint64_t close_ns;
	uint64_t last_event;       /* position + 1 of this number's newest event in HS_T_FD_EVENTS, 0 = none */
	char path[HS_FD_PATH_MAX]; /* path, peer or description, NUL-terminated ("" = unknown) */
};

/* hs_fd_event.op */
enum hs_fd_op {
	HS_FDE_CREATE = 1,         /* a generation began */
	HS_FDE_CLOSE = 2,          /* a generation ended (recorded before the close call) */
	HS_FDE_CLOSE_FAILED = 3,   /* a close call failed: err */
	HS_FDE_OWNER = 4,          /* a FILE, DIR or owner tag took over the open generation */
};

/*
 * One fd event.  In HS_T_FD_EVENTS (a ring shared by all threads) an event
 * at absolute position pos lives in entry pos % capacity: the writer takes
 * pos with a fetch-add on hs_header.fd_event_head, stores seq = 0, the
 * payload, then seq = pos + 1 (release), as struct hs_record; prev chains
 * the events of one number (position + 1, 0 = none), newest first, and a
 * reader stops where an entry no longer holds the position it expects.  In
 * HS_T_FD_HISTORY (copies kept for findings, reserved by a fetch-add on
 * the table's count) seq is 1 once the copy is complete, and prev is 0.
 *
 * A close folded into its creation (ABI 8; in the ring only, op
 * HS_FDE_CREATE): a close that finds its generation's creation still the
 * number's newest event in the ring (hs_fd.last_event, the entry still
 * holding that position) with the generation's flags and owner unchanged,
 * at most HS_FD_FOLD_MAX_NS after it, writes no event of its own: it
 * stores close_tid, close_stack and close_call into the creation, then
 * close_dt (release); close_dt - 1 is its time after ts_ns, 0 = not
 * folded.  It stands for the HS_FDE_CLOSE event (owner, kind and flags the
 * creation's, err 0, no path) that comes right after the creation in the
 * number's chain; a reader loads close_dt first (acquire), then the close
 * fields, and expands the two (the shim's findings copy them into
 * HS_T_FD_HISTORY expanded: a history entry is never folded).  The idea is
 * the ring records' folded close (HS_REC_FD_FOLD_CALL_SHIFT): a loop's
 * close costs no ring entry of its own (docs/design.md "File descriptors").
 */
#define HS_FD_FOLD_MAX_NS 0xfffffffeull /* ~4.29 s: a longer-lived generation's close is an event of its own */
struct hs_fd_event {
	uint64_t seq;              /* [atomic] */
	uint64_t ts_ns;
	uint64_t prev;             /* position + 1 of the same number's previous event, 0 = none */
	uint64_t owner;            /* the owner (HS_FDE_OWNER, or a creation by fopen/opendir) */
	int32_t fd;
	uint32_t gen;
	int32_t tid;
	uint32_t stack;
	uint8_t op;                /* enum hs_fd_op */
	uint8_t call;              /* enum hs_fd_call */
	uint8_t kind;              /* enum hs_fd_kind */
	uint8_t err;               /* errno of a failed close */
	uint32_t flags;            /* HS_FDF_* of the generation at the time */
	uint32_t close_dt;         /* [atomic] a creation's folded close: its time - ts_ns + 1; 0 = none (above) */
	int32_t close_tid;         /* the folded close's thread, */
	uint32_t close_stack;      /* stack */
	uint8_t close_call;        /* and enum hs_fd_call */
	uint8_t pad[3];
	char path[HS_FD_PATH_MAX]; /* creations: as hs_fd.path */
};
_Static_assert(sizeof(struct hs_fd_event) == 152, "an fd event is 152 bytes (ABI 8)");

/* ---- session reference count ---------------------------------------------- */

/*
 * "<session>/session.refs": present only in a session the shim made in the
 * default place (/dev/shm/heisen-$UID/<name>) for a bare LD_PRELOAD run.
 * live counts the processes of the session that started (a fork is counted
 * by its parent before the fork, an exec'd image replaces its earlier image)
 * and have not yet ended cleanly: exited by themselves with no finding in
 * their segment (and no fd left open that heisen-dump would call a leak).
 * A crash, a kill, a vanished process or a finding never decrements, so
 * such a session stays.  The process that takes live to 0 sets
 * HS_REFS_CLOSING (compare-and-swap from 0), renames the directory aside and
 * removes it; a process that finds HS_REFS_CLOSING starts a fresh session
 * of the same name.  The idea is a kernel object's reference count kept in
 * the file system, as POSIX shared memory objects are.
 */
#define HS_REFS_FILE "session.refs"
#define HS_REFS_MAGIC "HEISENRF"    /* 8 bytes, no terminator stored */
#define HS_REFS_CLOSING 0x80000000u /* in live: the session is being removed */
/*
 * pending[]: fork children that hold the reference their parent counted but
 * have no segment yet (the shim makes a fork child's segment at its first
 * recorded event, docs/design.md "Processes"): their pid in a free slot (0),
 * the slot pid % HS_REFS_PENDING first, then the next ones.  The child clears
 * its slot when it makes its segment; an image exec'd by such a child finds
 * its pid there, clears it and gives that reference back (as it does for an
 * earlier image's segment).  A child killed before either leaves its slot
 * and its reference: the session is kept.
 */
#define HS_REFS_PENDING 1000
struct hs_session_refs {
	char magic[8];             /* HS_REFS_MAGIC, written after the file is sized */
	uint32_t live;             /* [atomic] processes started and not yet ended cleanly, | HS_REFS_CLOSING */
	uint32_t kept;             /* [atomic] processes that ended with a finding or an fd left open */
	int32_t pending[HS_REFS_PENDING]; /* [atomic] pids of fork children without a segment yet; 0 free */
};
_Static_assert(sizeof(struct hs_session_refs) <= 4096, "session.refs is one page");

/* ---- layout ------------------------------------------------------------- */

/* Table capacities a segment is made with. */
struct hs_geometry {
	uint32_t modules, string_bytes, stacks, locks, edges, threads, findings, ring_records, pyframes;
	uint32_t fds, fd_events;   /* fd numbers tracked, fd events kept (a power of two) */
};

/* The default geometry (about 4.8 MiB of address space per process; sparse: what is used is allocated). */
#define HS_GEOMETRY_DEFAULT {512, 256 * 1024, 2048, 4096, 4096, 128, 128, 256, 4096, 1024, 4096}
/* The fallback when the session directory is short of space (about 0.5 MiB). */
#define HS_GEOMETRY_SMALL {128, 32 * 1024, 256, 512, 512, 16, 32, 64, 256, 256, 256}

static inline uint64_t hs_align64(uint64_t x) { return (x + 63u) & ~(uint64_t)63u; }

/* Index tables get twice the capacity of what they index, rounded to a power of two. */
static inline uint32_t hs_index_capacity(uint32_t n)
{
	uint32_t c = 16;
	while (c < 2 * n)
		c <<= 1;
	return c;
}

/*
 * Fill h->tables[] and h->segment_size for geometry g (ring_records must be a
 * power of two).  Used by the writer to lay out a new segment and by tests
 * to synthesize one; readers must not use it (they trust only what the
 * segment says, after validating it: the tables may lie in any order).
 *
 * The tables every process writes at its start (the header, the modules,
 * the strings' entry 0, the first thread slot, the findings, the fd table
 * and its event ring, the first thread's ring) come first, within 1.2 MiB
 * at the default geometry, each after the first from a page boundary, and
 * the tables only a process that takes locks,
 * records stacks or runs Python touches after them: the writer maps the
 * segment at a 2 MiB boundary (shim/segment.c map_segment), so a start
 * touches one page-table page of it, not three (bench/README.md "Process
 * start: page-table pages").
 */
static inline void hs_layout(struct hs_header *h, const struct hs_geometry *g)
{
	static const uint32_t entry[HS_T_COUNT] = {
		sizeof(struct hs_module), 1, sizeof(struct hs_stack), sizeof(struct hs_index_slot),
		sizeof(struct hs_index_slot), sizeof(struct hs_lock), sizeof(struct hs_index_slot),
		sizeof(struct hs_edge), sizeof(struct hs_index_slot), sizeof(struct hs_thread),
		sizeof(struct hs_finding), 0, sizeof(struct hs_pyframe), sizeof(struct hs_index_slot),
		sizeof(struct hs_fd), sizeof(struct hs_fd_event), sizeof(struct hs_fd_event),
		sizeof(uint64_t),
	};
	uint32_t cap[HS_T_COUNT] = {
		g->modules, g->string_bytes, g->stacks, hs_index_capacity(g->stacks),
		hs_index_capacity(g->stacks), g->locks, hs_index_capacity(g->locks),
		g->edges, hs_index_capacity(g->edges), g->threads, g->findings, g->threads,
		g->pyframes, hs_index_capacity(g->pyframes),
		g->fds, g->fd_events, g->findings * HS_FD_FINDING_EVENTS,
		g->findings * HS_CYCLE_EDGES_PER_FINDING,
	};
	static const uint8_t order[HS_T_COUNT] = {
		HS_T_MODULES, HS_T_STRINGS, HS_T_THREADS, HS_T_FINDINGS, HS_T_FDS, HS_T_FD_EVENTS, HS_T_RINGS,
		HS_T_STACKS, HS_T_STACK_INDEX, HS_T_SITE_INDEX, HS_T_LOCKS, HS_T_LOCK_INDEX, HS_T_EDGES,
		HS_T_EDGE_INDEX, HS_T_PYFRAMES, HS_T_PYFRAME_INDEX, HS_T_FD_HISTORY, HS_T_CYCLE_EDGES,
	};
	_Static_assert(HS_T_COUNT == 18, "order[] lists every table once");
	uint64_t off = hs_align64(sizeof(struct hs_header));
	for (int i = 0; i < HS_T_COUNT; i++) {
		int t = order[i];
		uint32_t es = entry[t];
		if (t == HS_T_RINGS)
			es = (uint32_t)(sizeof(struct hs_ring_header) + (uint64_t)g->ring_records * sizeof(struct hs_record));
		h->tables[t].offset = off;
		h->tables[t].entry_size = es;
		h->tables[t].capacity = cap[t];
		h->tables[t].count = 0;
		h->tables[t].dropped = 0;
		/* each later table from a page boundary: its first entries -- a
		   thread's slot, the first fds' block, the first fd events -- in one
		   page, not two (the modules share the header's page) */
		off = (off + (uint64_t)es * cap[t] + 4095u) & ~(uint64_t)4095u;
	}
	h->ring_records = g->ring_records;
	h->segment_size = off;
}

#endif /* HEISEN_FORMAT_H */
