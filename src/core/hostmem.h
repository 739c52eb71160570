/*
 * hostmem.h - how much host memory a suspend can still take: the system's
 * available memory (MemAvailable + SwapFree) and the headroom of every memory
 * cgroup v2 the process is in (memory.max - memory.current, the tightest
 * level wins). A suspend whose staging would not fit is refused before any
 * data moves, so running out is an error message, not the OOM killer: a lazily
 * populated pool (staging.h) faults its pages in during the copy, where no
 * error can be returned.
 *
 * The parsers take file text, so tests feed them any content.
 */
#ifndef GPUSNAP_CORE_HOSTMEM_H
#define GPUSNAP_CORE_HOSTMEM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* MemAvailable + SwapFree of /proc/meminfo text, in bytes; -1 if MemAvailable is missing. */
int gs_hostmem_parse_meminfo(const char *text, uint64_t *avail);
/*
 * memory.max - memory.current of one cgroup level; UINT64_MAX for "max" (no
 * limit); 0 when current is at or above max. -1 on text that is neither.
 */
int gs_hostmem_cgroup_headroom(const char *max_text, const char *current_text, uint64_t *headroom);
/*
 * The cgroup v2 path of this process from /proc/self/cgroup text (the "0::"
 * line), into buf; -1 if there is none (cgroup v1 only, or no cgroups).
 */
int gs_hostmem_parse_cgroup_path(const char *text, char *buf, size_t n);

struct gs_hostmem {
	uint64_t system;  /* MemAvailable + SwapFree; UINT64_MAX if unknown */
	uint64_t cgroup;  /* tightest cgroup headroom; UINT64_MAX if none or unknown */
	uint64_t avail;   /* the smaller of the two */
	char limit[64];   /* what sets avail: "MemAvailable + SwapFree", "cgroup memory.max" or "unknown" */
};

/* Reads this process's view (root is /, or a test folder standing in for it). */
void gs_hostmem_read(const char *root, struct gs_hostmem *m);
/*
 * The same for process pid's cgroups: memory written on its behalf (a tmpfs
 * file its agent fills, as dump --leave-running's copy) is charged to them.
 */
void gs_hostmem_read_pid(const char *root, pid_t pid, struct gs_hostmem *m);

#endif
