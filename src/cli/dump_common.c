/*
 * dump_common.c - metadata and sizes shared by dump and restore (see dump_common.h).
 */
#include "cli/dump_common.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
