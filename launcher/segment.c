/* SPDX-License-Identifier: MIT */
/*
 * launcher/segment.c — reading and marking segment headers.
 *
 * heisen-run touches only the header of a segment (include/heisen/format.h):
 * its identity (pid, start_ticks) to list the live processes of a session,
 * and its state word, which it moves from RUNNING to KILLED(signal) or
 * EXITED(status) when waitpid tells it how a process ended that could not
 * say so itself (SIGKILL, the OOM killer, a raw exit_group) — the contract
 * in docs/interfaces.md "Ending states".  The shared memory is not trusted:
 * a header is mapped only after the file is known to be a regular file big
 * enough for it, and used only after heisen-dump's own checks of it
 * (internal/seg_header.h) pass; which names are segments and how one is
 * opened is internal/seg_dir.h's rule, heisen-dump's too.  The writer may still
 * run, so the state word changes only by compare-and-swap from the RUNNING
 * value just read: if the process wrote its own ending first, it wins.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "heisen/format.h"
#include "internal/seg_dir.h"
#include "internal/seg_header.h"
#include "internal/seg_holes.h"
#include "internal/seg_rings.h"
#include "internal/snapshot_request.h"
#include "launcher.h"

_Static_assert(offsetof(struct hs_header, state) % 8 == 0, "state word must be 8-aligned for atomics");
_Static_assert(offsetof(struct hs_header, end_mono_ns) % 8 == 0, "end_mono_ns must be 8-aligned");

/* A mapped, validated header.  len is what was mapped (whole pages). */
struct seg_map {
	struct hs_header *h;
	size_t len;
	uid_t owner;               /* the file's owner when opened */
};

/*
 * Map and validate the header of segment `name` in dirfd, writable when
 * `rw`.  Returns 0, or -1 when the file is missing, not a regular file
 * (internal/seg_dir.h), too small or not a header heisen-dump accepts
 * (internal/seg_header.h, the same code); nothing stays mapped on failure.
 */
static int seg_map(int dirfd, const char *name, int rw, struct seg_map *m)
{
	struct stat st;
	struct hs_header hdr;
	char err[200];
	int fd = hs_seg_openat(dirfd, name, rw ? O_RDWR : O_RDONLY, &st, NULL, 0);
	if (fd < 0)
		return -1;
	if ((uint64_t)st.st_size < sizeof(struct hs_header)) {
		close(fd);
		return -1;
	}
	long pg = sysconf(_SC_PAGESIZE);
	size_t len = (sizeof(struct hs_header) + (size_t)pg - 1) & ~((size_t)pg - 1);
	void *a = mmap(NULL, len, PROT_READ | (rw ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
	close(fd);
	if (a == MAP_FAILED)
		return -1;
	/* heisen-dump's checks (internal/seg_header.h): only the header's bytes are read */
	if (hs_header_check(a, (uint64_t)st.st_size, &hdr, err, sizeof err) != 0) {
		munmap(a, len);
		return -1;
	}
	m->h = a;
	m->len = len;
	m->owner = st.st_uid;
	return 0;
}

static void seg_unmap(struct seg_map *m)
{
	munmap(m->h, m->len);
}

/* ---- the watchdog's segments: mapped once, read every tick ------------------
 *
 * The watchdog samples every live process of the session twice a second.
 * Opening, mapping and validating every segment on every tick (and listing
 * the directory once per pid) cost half a core with 200 idle processes; so
 * each segment whose process is RUNNING is mapped once, when it is first
 * seen, validated then, and kept mapped until its state leaves RUNNING, its
 * file goes away or is replaced (another inode), or its process is gone.
 * The directory is listed again only when its mtime changed (a segment was
 * created, renamed or removed).  A tick then reads only what moves: the
 * state word and the ring heads of live thread slots.  Chunks the writer
 * commits after the mapping was made (the slots of threads started later)
 * read as zeros until hr_seg_remap maps the segment again (watchdog.c does
 * when /proc shows a thread its mapping does not).
 */
struct watched {
	char name[64];
	pid_t pid;
	unsigned image;
	ino_t ino;
	void *map;          /* whole segment, holes covered; NULL once it is not RUNNING */
	size_t len;
	uint64_t mapped_ms; /* when it was (re)mapped, hr_now_ms() */
	uint64_t checked_ms;/* when its process's start time was last checked (0 = never) */
	int listed;         /* in the last listing of the directory */
};
static struct watched *watch;
static size_t nwatch;
static int watch_dirfd = -1;
static struct timespec watch_mtime;

static void watched_unmap(struct watched *w)
{
	if (w->map)
		munmap(w->map, w->len);
	w->map = NULL;
}

/* Map segment w->name of dirfd whole (holes covered) if it is a valid
 * RUNNING segment of w->pid; else leave w->map NULL. */
static void watched_map(int dirfd, struct watched *w)
{
	struct stat st;
	struct hs_header hdr;
	char err[200];
	int fd = hs_seg_openat(dirfd, w->name, O_RDONLY, &st, NULL, 0);
	w->map = NULL;
	if (fd < 0)
		return;
	if ((uint64_t)st.st_size < sizeof(struct hs_header)) {
		close(fd);
		return;
	}
	void *a = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	if (a != MAP_FAILED)
		hs_cover_holes(fd, a, (uint64_t)st.st_size);
	close(fd);
	if (a == MAP_FAILED)
		return;
	/* heisen-dump's checks (internal/seg_header.h), then the watchdog's own: pid and RUNNING */
	if (hs_header_check(a, (uint64_t)st.st_size, &hdr, err, sizeof err) != 0 || hdr.pid != w->pid ||
	    HS_STATE_OF(hdr.state) != HS_STATE_RUNNING) {
		munmap(a, (size_t)st.st_size);
		return;
	}
	w->map = a;
	w->len = (size_t)st.st_size;
	w->ino = st.st_ino;
	w->mapped_ms = hr_now_ms();
}

/* Bring the cache up to date with dirfd: list it again when its mtime
 * moved, map new segments, drop those gone or replaced, unmap those whose
 * state left RUNNING.  Returns the number of segment names. */
static size_t watch_refresh(int dirfd)
{
	struct stat st;
	if (dirfd != watch_dirfd) {
		for (size_t i = 0; i < nwatch; i++)
			watched_unmap(&watch[i]);
		nwatch = 0;
		watch_dirfd = dirfd;
		watch_mtime = (struct timespec){0, 0};
	}
	if (fstat(dirfd, &st) == 0 &&
	    (st.st_mtim.tv_sec != watch_mtime.tv_sec || st.st_mtim.tv_nsec != watch_mtime.tv_nsec ||
	     nwatch == 0)) {
		DIR *d = hs_seg_dir_open(dirfd);
		if (d) {
			watch_mtime = st.st_mtim;
			for (size_t i = 0; i < nwatch; i++)
				watch[i].listed = 0;
			struct hs_seg_dirent de;
			while (hs_seg_dir_next(d, &de)) {
				pid_t p = de.pid;
				unsigned im = de.image;
				size_t i = 0;
				/* a misnamed *.seg names no process: nothing to watch */
				if (de.kind != HS_NAME_SEGMENT || strlen(de.name) >= sizeof watch->name)
					continue;
				while (i < nwatch && strcmp(watch[i].name, de.name) != 0)
					i++;
				if (i == nwatch) {
					struct watched *v = realloc(watch, (nwatch + 1) * sizeof *v);
					if (!v)
						continue;
					watch = v;
					watch[nwatch] = (struct watched){.pid = p, .image = im};
					strcpy(watch[nwatch].name, de.name);
					watched_map(dirfd, &watch[nwatch++]);
				} else if (watch[i].map && de.ino != watch[i].ino) {
					watched_unmap(&watch[i]); /* replaced under the same name */
					watched_map(dirfd, &watch[i]);
				}
				watch[i].listed = 1;
			}
			closedir(d);
			size_t k = 0;
			for (size_t i = 0; i < nwatch; i++) {
				if (watch[i].listed)
					watch[k++] = watch[i];
				else
					watched_unmap(&watch[i]);
			}
			nwatch = k;
		}
	}
	for (size_t i = 0; i < nwatch; i++) {
		const struct hs_header *h = watch[i].map;
		if (h && HS_STATE_OF(__atomic_load_n(&h->state, __ATOMIC_ACQUIRE)) != HS_STATE_RUNNING)
			watched_unmap(&watch[i]);
	}
	return nwatch;
}

/* The mapped RUNNING segment of pid with the highest image, or NULL. */
static struct watched *watched_of(pid_t pid)
{
	struct watched *best = NULL;
	for (size_t i = 0; i < nwatch; i++)
		if (watch[i].pid == pid && (!best || watch[i].image > best->image))
			best = &watch[i];
	return best && best->map ? best : NULL;
}

size_t hr_seg_watch(int dirfd)
{
	return watch_refresh(dirfd);
}

void hr_seg_remap(int dirfd, pid_t pid)
{
	struct watched *w = watched_of(pid);
	if (w && dirfd == watch_dirfd && hr_now_ms() - w->mapped_ms >= HR_REMAP_MS) {
		watched_unmap(w);
		watched_map(dirfd, w);
	}
}

/*
 * Name of the highest-image segment of pid in dirfd into out[n].  Returns 1
 * if there is one, 0 if not.
 */
static int latest_segment(int dirfd, pid_t pid, char *out, size_t n)
{
	DIR *d = hs_seg_dir_open(dirfd);
	if (!d)
		return 0;
	struct hs_seg_dirent de;
	long best = -1;
	while (hs_seg_dir_next(d, &de)) {
		if (de.kind == HS_NAME_SEGMENT && de.pid == pid && (long)de.image > best && strlen(de.name) < n) {
			best = de.image;
			strcpy(out, de.name);
		}
	}
	closedir(d);
	return best >= 0;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * Move the latest segment of pid from RUNNING to `next` if it belongs to the
 * process started at `ticks` (0 = do not check).  Returns 1 if this call
 * changed it, 0 if there was nothing to change (no segment, not ours, not
 * RUNNING, or the process wrote its own end first).
 */
static int mark(int dirfd, pid_t pid, uint64_t ticks, uint64_t next)
{
	char name[64];
	struct seg_map m;
	if (!latest_segment(dirfd, pid, name, sizeof name) || seg_map(dirfd, name, 1, &m) < 0)
		return 0;
	int done = 0;
	/* start_ticks is written once, before the state turns RUNNING. */
	uint64_t cur = __atomic_load_n(&m.h->state, __ATOMIC_ACQUIRE);
	if (m.h->pid == pid && HS_STATE_OF(cur) == HS_STATE_RUNNING &&
	    (ticks == 0 || m.h->start_ticks == 0 || m.h->start_ticks == ticks)) {
		/* acq_rel: a reader that sees the new state also sees what the
		 * process wrote before it died (it published with release). */
		done = __atomic_compare_exchange_n(&m.h->state, &cur, next, 0, __ATOMIC_ACQ_REL,
						   __ATOMIC_ACQUIRE);
		if (done) {
			uint64_t zero = 0;
			/* Only if the process did not set it on its way out. */
			__atomic_compare_exchange_n(&m.h->end_mono_ns, &zero, mono_ns(), 0,
						    __ATOMIC_RELEASE, __ATOMIC_RELAXED);
		}
	}
	seg_unmap(&m);
	return done;
}

/*
 * Record how pid ended (a waitpid status) in its latest segment if that
 * still says RUNNING and was made by the process that started at
 * start_ticks (0 = unknown, do not check).  Returns 1 if marked, else 0.
 */
int hr_seg_mark_ended(int dirfd, pid_t pid, uint64_t start_ticks, int wstatus)
{
	uint64_t next;
	if (WIFSIGNALED(wstatus))
		next = HS_STATE_PACK(HS_STATE_KILLED, WTERMSIG(wstatus));
	else if (WIFEXITED(wstatus))
		next = HS_STATE_PACK(HS_STATE_EXITED, WEXITSTATUS(wstatus));
	else
		return 0;
	return mark(dirfd, pid, start_ticks, next);
}

/*
 * For a process that heisen-run killed but cannot reap (not its child): if
 * the segment's process is gone — no such pid, or the pid now has another
 * start time — mark it KILLED(signo).  Returns 1 if marked, else 0.
 */
int hr_seg_mark_killed_if_gone(int dirfd, pid_t pid, int signo)
{
	char name[64];
	struct seg_map m;
	if (!latest_segment(dirfd, pid, name, sizeof name) || seg_map(dirfd, name, 0, &m) < 0)
		return 0;
	uint64_t want = m.h->start_ticks;
	seg_unmap(&m);
	uint64_t now;
	if (hr_proc_start_ticks(pid, &now) == 0 && (want == 0 || now == want))
		return 0; /* still there (perhaps a zombie someone else will reap) */
	return mark(dirfd, pid, want, HS_STATE_PACK(HS_STATE_KILLED, signo));
}

/*
 * Pids of the session whose latest segment says RUNNING and that are still
 * the process that made it (start time checked against /proc, so a reused
 * pid is never listed).  Writes at most max pids to out; returns how many.
 */
size_t hr_seg_live_pids(int dirfd, pid_t *out, size_t max)
{
	size_t n = 0;
	uint64_t now_ms = hr_now_ms();
	watch_refresh(dirfd);
	for (size_t i = 0; i < nwatch && n < max; i++) {
		const struct hs_header *h = watch[i].map;
		uint64_t now;
		pid_t p = watch[i].pid;
		if (!h)
			continue;
		uint64_t want = h->start_ticks;
		/* the start time is checked at first sight and then every
		 * HR_RECHECK_MS (a pid reused after an unreaped SIGKILL); a
		 * process that is gone fails its /proc reads every tick */
		if (!watch[i].checked_ms || now_ms - watch[i].checked_ms >= HR_RECHECK_MS) {
			if (hr_proc_start_ticks(p, &now) < 0 || (want != 0 && now != want)) {
				watched_unmap(&watch[i]); /* gone, or the pid is another process now */
				continue;
			}
			watch[i].checked_ms = now_ms;
		}
		size_t j = 0;
		while (j < n && out[j] != p)
			j++;
		if (j == n)
			out[n++] = p;
	}
	return n;
}

/*
 * The watchdog read pid's start time (start_ticks, from /proc/PID/stat)
 * for its own purpose: it counts as the start-time check of pid's mapped
 * segment (hr_seg_live_pids), so that check costs no read of its own.
 * Returns 0 when the segment is pid's, -1 when the pid now belongs to
 * another process (the segment is let go: the pid is not listed again) or
 * no segment of pid is mapped.
 */
int hr_seg_confirm(pid_t pid, uint64_t start_ticks)
{
	struct watched *w = watched_of(pid);
	if (!w)
		return -1;
	uint64_t want = ((const struct hs_header *)w->map)->start_ticks;
	if (want != 0 && want != start_ticks) {
		watched_unmap(w);
		return -1;
	}
	w->checked_ms = hr_now_ms();
	return 0;
}

/*
 * Who claims pid in the session: its latest segment's start_ticks, the uid
 * that owns the file (whoever could have written it) and whether it says
 * the snapshot handler is installed (hs_header.snapshot_signal non-zero;
 * its value is not used).  All of it is only a claim until checked against
 * /proc (hs_snapshot_target_verify).  Returns 0, or -1 when pid has no
 * valid segment.
 */
int hr_seg_identity(int dirfd, pid_t pid, uint64_t *start_ticks, uid_t *owner, int *snapshot_installed)
{
	char name[64];
	struct seg_map m;
	if (!latest_segment(dirfd, pid, name, sizeof name) || seg_map(dirfd, name, 0, &m) < 0)
		return -1;
	int ok = m.h->pid == pid;
	*start_ticks = m.h->start_ticks;
	*owner = m.owner;
	*snapshot_installed = m.h->snapshot_signal != 0;
	seg_unmap(&m);
	return ok ? 0 : -1;
}

/* Number of segment files in dirfd, misnamed ones included (heisen-dump
 * names those: internal/seg_dir.h); 0 if it cannot be read. */
int hr_seg_count(int dirfd)
{
	DIR *d = hs_seg_dir_open(dirfd);
	if (!d)
		return 0;
	int n = 0;
	struct hs_seg_dirent de;
	while (hs_seg_dir_next(d, &de))
		n += de.kind == HS_NAME_SEGMENT || de.kind == HS_NAME_MISNAMED;
	closedir(d);
	return n;
}


/*
 * The ring head (records written so far) of every live thread slot of
 * pid's live segment: tids[i] and heads[i], at most max.  Returns how many,
 * 0 when the segment cannot be read.  A thread's own records are its
 * progress in the per-thread hang rule (watchdog.c).
 */
size_t hr_seg_thread_heads(int dirfd, pid_t pid, pid_t *tids, uint64_t *heads, size_t max)
{
	struct watched *w;
	(void)dirfd;
	if (!(w = watched_of(pid)))
		return 0;
	/* the table descriptors are shared memory: checked on every read; the reading is
	   heisen-dump's too (internal/seg_rings.h) */
	return hs_rings_thread_heads(w->map, w->len, w->map, tids, heads, max);
}

/*
 * Progress of pid as its latest segment shows it: the records written to
 * its rings (internal/seg_rings.h hs_rings_events: the sum of the ring
 * heads of the thread slots ever used, every offset checked against the
 * mapping, as heisen-dump counts them) into *events, and the snapshot signal it
 * installed (0 = none) into *snapsig, with the si_value its requests carry
 * (hs_snapshot_value) into *snapval.  Returns 0, or -1 when pid has no
 * usable segment.
 */
int hr_seg_progress(int dirfd, pid_t pid, uint64_t *events, int *snapsig, uint64_t *snapval)
{
	struct watched *w;
	(void)dirfd;
	/* the sum heisen-dump makes too (internal/seg_rings.h): descriptors checked on every read */
	if (!(w = watched_of(pid)) || hs_rings_events(w->map, w->len, w->map, events) != 0)
		return -1;
	const struct hs_header *h = w->map;
	*snapsig = h->snapshot_signal;
	*snapval = hs_snapshot_value(h->start_real_ns);
	return 0;
}

/*
 * Leave a note next to pid's latest segment that it made no progress
 * since since_mono_ns (CLOCK_MONOTONIC, the writer's clock) for `seconds`:
 * "<pid>.<image>.stall" holding "since_mono_ns seconds\n", replaced
 * atomically (write, then rename).  heisen-dump reads it for a process that
 * was killed or vanished (docs/interfaces.md "Python and the GIL", hang):
 * the stall outlives heisen-run.  Returns 0 or -1.
 */
int hr_seg_note_stall(int dirfd, pid_t pid, uint64_t since_mono_ns, double seconds)
{
	char name[64], note[80], tmp[96], line[64];
	size_t len;
	if (!latest_segment(dirfd, pid, name, sizeof name) || (len = strlen(name)) < 5)
		return -1;
	snprintf(note, sizeof note, "%.*s.stall", (int)(len - 4), name);
	snprintf(tmp, sizeof tmp, ".%s.tmp", note);
	int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	int n = snprintf(line, sizeof line, "%llu %.3f\n", (unsigned long long)since_mono_ns, seconds);
	int ok = write(fd, line, (size_t)n) == n;
	close(fd);
	if (!ok || renameat(dirfd, tmp, dirfd, note) != 0) {
		unlinkat(dirfd, tmp, 0);
		return -1;
	}
	return 0;
}
