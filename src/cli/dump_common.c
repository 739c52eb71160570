/*
 * dump_common.c - metadata and sizes shared by dump and restore (see dump_common.h).
 */
#define LOG_PREFIX "dump: "
#include "cli/dump_common.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/settings.h"
#include "core/hostmem.h"

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
	const char *mem = gs_setting_str(GS_S_STAGE_DIR);
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
	else if (!gs_image_stage_create(mem ? mem : "/dev/shm", need, total, cpu_state, &stage, &e))
		return stage;
	else
		snprintf(why, n, "%s", e.msg);
	pr_info("no copy in memory for --leave-running (%s): the image is written inside the pause", why);
	return NULL;
}

int dump_agent_into(pid_t pid, struct cli_agent *agent, const char *dir, bool stage, double timeout,
		    const struct gs_dump_opts *d, struct gs_err *err)
{
	if (!stage)
		return cli_agent_dump(pid, agent, dir, timeout, d, err);
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return gs_fail_errno(err, GS_E_FAILURE, errno, "cannot open '%s'", dir);
	int rc = cli_agent_dump_fd(pid, agent, fd, timeout, d, err);
	close(fd);
	return rc;
}
