/*
 * dump_common.c - metadata and sizes shared by dump and restore (see dump_common.h).
 */
#define LOG_PREFIX "dump: "
#include "cli/dump_common.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/settings.h"
#include "core/hostmem.h"
#include "image/image_fs.h"
#include "image/manifest.h"

int dump_set_metadata(struct gs_image_writer *w, const struct cli_session *s, const uint64_t *vram, uint64_t mask,
		      struct gs_err *err)
{
	for (int i = 0; i < s->ngpus && i < 64; i++) {
		if (!(mask & (1ULL << i)))
			continue;
		char key[128], value[32];
		snprintf(key, sizeof(key), "%s%s", DUMP_META_VRAM_PREFIX, s->gpus[i].uuid_str);
		snprintf(value, sizeof(value), "%llu", (unsigned long long)vram[i]);
		int rc = gs_image_writer_set_metadata(w, key, value, err);
		if (rc)
			return rc;
	}
	return 0;
}

int dump_add_gpus(struct gs_image_writer *w, const struct cli_session *s, uint64_t mask, struct gs_err *err)
{
	for (int i = 0; i < s->ngpus; i++) {
		const struct gs_gpu *g = &s->gpus[i];
		if (mask && (i >= 64 || !(mask & (1ULL << i))))
			continue;
		struct gs_image_gpu ig = {
			.index = (uint32_t)g->index, .name = g->name, .cc_major = (uint32_t)g->cc_major,
			.cc_minor = (uint32_t)g->cc_minor, .total_memory = g->total_bytes,
		};
		memcpy(ig.uuid, g->uuid.bytes, 16);
		int rc = gs_image_writer_add_gpu(w, &ig, err);
		if (rc)
			return rc;
	}
	return 0;
}

const char *dump_restore_cmd(bool cpu_listed)
{
	return cpu_listed ? "gpusnap restore" : "gpusnap restore --allow-unverified-cpu";
}

uint64_t dump_dir_bytes(const char *dir, const char *sub)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", dir, sub);
	DIR *d = opendir(path);
	if (!d)
		return 0;
	uint64_t total = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		struct stat st;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
			total += (uint64_t)st.st_size;
	}
	closedir(d);
	return total;
}

uint64_t dump_stage_need(const struct cli_agent *agent, const uint64_t *vram)
{
	uint64_t need = 0;
	for (int i = 0; i < CLI_MAX_GPUS; i++)
		need += vram[i];
	return agent->alloc_bytes > need ? agent->alloc_bytes : need;
}

struct gs_image_stage *dump_stage_open(pid_t pid, const struct cli_agent *agent, uint64_t need, uint64_t total,
				       bool cpu_state, char *why, size_t n)
{
	struct gs_err e = { 0 };
	struct gs_image_stage *stage = NULL;
	/*
	 * tmpfs pages are charged to the process whose agent writes them (its
	 * cgroup) and taken from the host's memory, whatever the tmpfs's size
	 * says: both must have room, or the copy would push the process out
	 */
	struct gs_hostmem hm;
	gs_hostmem_read_pid("", pid, &hm);
	if (!(agent->caps & GS_CAP_DIR_FD))
		snprintf(why, n, "the agent takes no image directory as a descriptor");
	else if (hm.avail != UINT64_MAX && hm.avail < total + (total >> 3) + (256u << 20))
		snprintf(why, n, "the process has %llu MiB of host memory left (%s), the GPU data needs %llu MiB",
			 (unsigned long long)(hm.avail >> 20), hm.limit, (unsigned long long)(total >> 20));
	else if (!gs_image_stage_create(gs_setting_str(GS_S_STAGE_DIR), need, total, cpu_state, pid, &stage, &e))
		return stage;
	else
		snprintf(why, n, "%s", e.msg);
	pr_info("no copy in memory for --leave-running (%s): the image is written inside the pause", why);
	return NULL;
}

int dump_agent_into(pid_t pid, struct cli_agent *agent, const char *dir, const struct gs_image_stage *stage,
		    double timeout, const struct gs_dump_opts *d, struct gs_err *err)
{
	return stage ? cli_agent_dump_fd(pid, agent, gs_image_stage_fd(stage), timeout, d, err)
		     : cli_agent_dump(pid, agent, dir, timeout, d, err);
}

/* An image of the series --keep looks at: its directory's name beside DIR and when it was taken. */
struct series_image {
	char name[NAME_MAX + 1];
	int64_t created_ns;
};

static int newest_first(const void *a, const void *b)
{
	const struct series_image *x = a, *y = b;
	if (x->created_ns != y->created_ns)
		return x->created_ns > y->created_ns ? -1 : 1;
	return -strcmp(x->name, y->name);
}

/*
 * --keep K, after DIR was published: the series is the images beside DIR
 * (directories of DIR's directory holding a manifest, but not the kept
 * images of failed dumps, which may be a process's only copy) of the same process
 * (DIR's source_pid and source_comm) written into the same store (its id);
 * the newest K by creation time stay (DIR always), the others are removed
 * (manifest first, so a half-removed one is never taken for an image; one a
 * reader holds is left for the next run), then the store's gc frees what
 * only they used. The dump is done already: what fails here is said on
 * stderr, and the exit code stays 0. Images of other processes, other
 * stores, or without a store are never touched.
 */
void dump_keep_newest(struct dump_keep *k)
{
	char parent[PATH_MAX], self[NAME_MAX + 1];
	snprintf(parent, sizeof(parent), "%s", k->dir);
	char *slash = strrchr(parent, '/');
	snprintf(self, sizeof(self), "%s", slash ? slash + 1 : parent);
	if (slash)
		*slash = '\0';
	struct gs_err err = { 0 };
	int pfd = -1;
	struct stat st;
	struct gs_manifest mine = { 0 };
	struct series_image *imgs = NULL;
	size_t n = 0, cap = 0;
	DIR *d = NULL;
	int dfd = -1;
	if (gs_fs_open_dir_checked(*parent ? parent : "/", k->dir, &pfd, &st, &err) != 0 ||
	    (dfd = openat(pfd, self, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
	    gs_manifest_read_at(dfd, k->dir, &mine, &err)) {
		fprintf(stderr, "gpusnap: --keep: cannot read '%s' again (%s): no image removed\n", k->dir,
			err.msg[0] ? err.msg : strerror(errno));
		goto out;
	}
	close(dfd);
	dfd = -1;
	int lfd = dup(pfd);
	d = lfd >= 0 ? fdopendir(lfd) : NULL;
	struct dirent *e;
	while (d && (e = readdir(d))) {
		/* not DIR, a temporary directory, or an image a failed dump kept (perhaps a process's only copy) */
		if (e->d_name[0] == '.' || !strcmp(e->d_name, self) || strstr(e->d_name, ".kept-"))
			continue;
		int fd = openat(pfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0)
			continue;
		struct gs_manifest m;
		struct gs_err me = { 0 };
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/%s", parent, e->d_name);
		bool ours = fstat(fd, &st) == 0 && !gs_fs_check_trusted(&st, path, &me) &&
			    faccessat(fd, GS_FMT_MANIFEST_NAME, F_OK, AT_SYMLINK_NOFOLLOW) == 0 &&
			    !gs_manifest_read_at(fd, path, &m, &me);
		close(fd);
		if (!ours)
			continue;
		bool series = m.has_store && !memcmp(m.store.store_id, gs_store_id(k->st), 16) &&
			      m.info.source_pid == mine.info.source_pid && !strcmp(m.info.source_comm, mine.info.source_comm);
		int64_t created = m.info.created_ns;
		gs_manifest_free(&m);
		if (!series)
			continue;
		if (n == cap) {
			struct series_image *v = realloc(imgs, (cap = cap ? cap * 2 : 16) * sizeof(*v));
			if (!v)
				break;
			imgs = v;
		}
		snprintf(imgs[n].name, sizeof(imgs[n].name), "%s", e->d_name);
		imgs[n++].created_ns = created;
	}
	if (n)
		qsort(imgs, n, sizeof(*imgs), newest_first);
	/* DIR is one of the K kept: the K - 1 newest others stay */
	for (size_t i = (size_t)k->keep - 1; i < n; i++) {
		int fd = openat(pfd, imgs[i].name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
			fprintf(stderr, "gpusnap: --keep: '%s/%s' is being read: left for the next dump\n", parent, imgs[i].name);
			close(fd);
			continue;
		}
		int u = unlinkat(fd, GS_FMT_MANIFEST_NAME, 0);
		close(fd);
		if (u < 0 || gs_fs_remove_tree(pfd, imgs[i].name)) {
			fprintf(stderr, "gpusnap: --keep: cannot remove '%s/%s': %s\n", parent, imgs[i].name, strerror(errno));
			continue;
		}
		k->removed++;
		pr_info("--keep %d: removed '%s/%s'", k->keep, parent, imgs[i].name);
	}
	if (k->removed) {
		fsync(pfd);
		struct gs_store_gc_result g;
		if (gs_store_gc(k->store_path, false, 30.0, &g, NULL, &err))
			fprintf(stderr, "gpusnap: --keep: the gc after removing %" PRIu64 " images failed: %s\n", k->removed,
				err.msg);
		k->gc_objects = g.objects_removed;
		k->gc_bytes = g.bytes_removed;
	}
out:
	if (d)
		closedir(d);
	if (dfd >= 0)
		close(dfd);
	if (pfd >= 0)
		close(pfd);
	free(imgs);
	gs_manifest_free(&mine);
}
