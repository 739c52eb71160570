/*
 * dump_common.c - metadata and sizes shared by dump and restore (see dump_common.h).
 */
#include "cli/dump_common.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
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
