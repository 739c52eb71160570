/*
 * hostmem.c - the host memory a suspend can still take: /proc/meminfo and the
 * process's cgroup v2 levels (see hostmem.h).
 */
#include "core/hostmem.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

/* The line after l in text; NULL after the last. */
static const char *next_line(const char *l)
{
	const char *nl = strchr(l, '\n');
	return nl ? nl + 1 : NULL;
}

/* The kB value of "Name:   123 kB" in meminfo text; -1 if absent. */
static int meminfo_kb(const char *text, const char *name, uint64_t *kb)
{
	size_t n = strlen(name);
	for (const char *l = text; l && *l; l = next_line(l)) {
		if (strncmp(l, name, n) || l[n] != ':')
			continue;
		char *end;
		errno = 0;
		unsigned long long v = strtoull(l + n + 1, &end, 10);
		if (errno || end == l + n + 1)
			return -1;
		*kb = v;
		return 0;
	}
	return -1;
}

int gs_hostmem_parse_meminfo(const char *text, uint64_t *avail)
{
	uint64_t kb, swap = 0;
	if (meminfo_kb(text, "MemAvailable", &kb))
		return -1;
	meminfo_kb(text, "SwapFree", &swap); /* no swap line: no swap */
	*avail = (kb + swap) * 1024;
	return 0;
}

/* A decimal byte count followed by nothing but white space. */
static int parse_bytes(const char *t, uint64_t *v)
{
	char *end;
	errno = 0;
	if (!t || *t < '0' || *t > '9')
		return -1;
	unsigned long long x = strtoull(t, &end, 10);
	if (errno)
		return -1;
	while (*end == ' ' || *end == '\n' || *end == '\t')
		end++;
	if (*end)
		return -1;
	*v = x;
	return 0;
}

int gs_hostmem_cgroup_headroom(const char *max_text, const char *current_text, uint64_t *headroom)
{
	if (max_text && !strncmp(max_text, "max", 3) && (!max_text[3] || max_text[3] == '\n')) {
		*headroom = UINT64_MAX;
		return 0;
	}
	uint64_t max, cur;
	if (parse_bytes(max_text, &max) || parse_bytes(current_text, &cur))
		return -1;
	*headroom = cur >= max ? 0 : max - cur;
	return 0;
}

int gs_hostmem_parse_cgroup_path(const char *text, char *buf, size_t n)
{
	for (const char *l = text; l && *l; l = next_line(l)) {
		if (strncmp(l, "0::", 3))
			continue;
		const char *p = l + 3, *e = strchr(p, '\n');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		if (!len || len >= n || *p != '/')
			return -1;
		memcpy(buf, p, len);
		buf[len] = 0;
		return 0;
	}
	return -1;
}

/* The tightest headroom over the cgroup at rel and its ancestors; UINT64_MAX if none limits. */
static uint64_t cgroup_headroom(const char *root, const char *rel)
{
	char dir[PATH_MAX], path[PATH_MAX + 32], max[64], cur[64];
	uint64_t best = UINT64_MAX;
	if ((size_t)snprintf(dir, sizeof(dir), "%s/sys/fs/cgroup%s", root, rel) >= sizeof(dir))
		return best;
	size_t base = strlen(root) + strlen("/sys/fs/cgroup");
	for (;;) {
		uint64_t h;
		snprintf(path, sizeof(path), "%s/memory.max", dir);
		if (gs_read_small_file(path, max, sizeof(max)) > 0) {
			snprintf(path, sizeof(path), "%s/memory.current", dir);
			if (gs_read_small_file(path, cur, sizeof(cur)) > 0 && !gs_hostmem_cgroup_headroom(max, cur, &h) && h < best)
				best = h;
		}
		char *slash = strrchr(dir, '/');
		if (!slash || (size_t)(slash - dir) < base)
			break; /* the cgroup root has no memory.max */
		*slash = 0;
	}
	return best;
}

static void read_for(const char *root, const char *proc, struct gs_hostmem *m)
{
	char text[8192], path[PATH_MAX], rel[PATH_MAX];
	m->system = m->cgroup = UINT64_MAX;
	snprintf(path, sizeof(path), "%s/proc/meminfo", root);
	if (gs_read_small_file(path, text, sizeof(text)) > 0)
		gs_hostmem_parse_meminfo(text, &m->system);
	snprintf(path, sizeof(path), "%s/proc/%s/cgroup", root, proc);
	if (gs_read_small_file(path, text, sizeof(text)) > 0 && !gs_hostmem_parse_cgroup_path(text, rel, sizeof(rel)))
		m->cgroup = cgroup_headroom(root, strcmp(rel, "/") ? rel : "");
	m->avail = m->system < m->cgroup ? m->system : m->cgroup;
	snprintf(m->limit, sizeof(m->limit), "%s",
		 m->avail == UINT64_MAX	     ? "unknown"
		 : m->cgroup < m->system ? "cgroup memory.max"
					 : "MemAvailable + SwapFree");
}

void gs_hostmem_read(const char *root, struct gs_hostmem *m)
{
	read_for(root, "self", m);
}

void gs_hostmem_read_pid(const char *root, pid_t pid, struct gs_hostmem *m)
{
	char proc[32];
	snprintf(proc, sizeof(proc), "%d", (int)pid);
	read_for(root, proc, m);
}
