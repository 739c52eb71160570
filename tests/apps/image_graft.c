/*
 * image_graft.c - a test tool: copies a gpusnap image (manifest, data, cpu/)
 * into a new image with one extra allocation of stored chunks, so the shell
 * tests can corrupt data files of a driver-path image (which has none of its
 * own) and check that `gpusnap restore` refuses it.
 *
 *   image_graft SRC DST      exit 0, or the gpusnap exit code of the error
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/err.h"
#include "image/image.h"
#include "image_test_writer.h" /* tests/common */

static int fail(const struct gs_err *err)
{
	fprintf(stderr, "image_graft: %s\n", err->msg);
	return err->code ? err->code : 1;
}

static int copy_file(const char *from, const char *to)
{
	int in = open(from, O_RDONLY | O_CLOEXEC), out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	char buf[65536];
	ssize_t n = 0;
	while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, (size_t)n) != n)
			n = -1;
	int rc = in >= 0 && out >= 0 && n == 0 ? 0 : -1;
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: image_graft SRC DST\n");
		return GS_E_USAGE;
	}
	struct gs_err err = { 0 };
	struct gs_image *img;
	if (gs_image_open(argv[1], &img, &err))
		return fail(&err);
	const struct gs_image_info *info = gs_image_get_info(img);
	struct gs_image_writer_opts o = { .source_pid = info->source_pid, .source_comm = info->source_comm, .how = info->how };
	struct gs_image_writer *w;
	if (image_test_writer_open(argv[2], &o, &w, &err))
		return fail(&err);
	uint64_t next_id = 1;
	for (size_t i = 0; i < gs_image_gpu_count(img); i++)
		if (gs_image_writer_add_gpu(w, gs_image_gpu_at(img, i), &err))
			return fail(&err);
	for (size_t i = 0; i < gs_image_metadata_count(img); i++)
		if (gs_image_writer_set_metadata(w, gs_image_metadata_at(img, i)->key, gs_image_metadata_at(img, i)->value,
						 &err))
			return fail(&err);
	for (size_t i = 0; i < gs_image_allocation_count(img); i++) {
		const struct gs_image_allocation *a = gs_image_allocation_at(img, i);
		if (gs_image_writer_add_allocation(w, a, &err))
			return fail(&err);
		next_id = a->id + 1;
	}
	for (size_t i = 0; i < gs_image_chunk_count(img); i++) {
		const struct gs_image_chunk *c = gs_image_chunk_at(img, i);
		void *buf = malloc(c->length);
		if (!buf || gs_image_read_chunk(img, i, buf, &err) ||
		    gs_image_write_chunk(w, c->alloc_id, c->offset, buf, c->length, &err))
			return fail(&err);
		free(buf);
	}
	/* the graft: 4 chunks of pseudo-random bytes on the first GPU */
	const size_t chunk = 65536, size = 3 * 65536 + 100;
	struct gs_image_allocation extra = { .id = next_id, .va = 0x7f0000000000ULL, .size = size,
					     .gpu_index = gs_image_gpu_count(img) ? gs_image_gpu_at(img, 0)->index : 0,
					     .kind = GS_ALLOC_KIND_DEVICE };
	unsigned char *data = malloc(size);
	uint32_t x = 2463534242u;
	for (size_t i = 0; data && i < size; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		data[i] = (unsigned char)x;
	}
	if (!data || gs_image_writer_add_allocation(w, &extra, &err))
		return fail(&err);
	for (size_t off = 0; off < size; off += chunk)
		if (gs_image_write_chunk(w, extra.id, off, data + off, size - off < chunk ? size - off : chunk, &err))
			return fail(&err);
	free(data);
	if (info->cpu_state) {
		char from[4096], to[4096], f1[8192], f2[8192];
		if (gs_image_cpu_dir(img, from, sizeof(from), &err) || gs_image_writer_cpu_dir(w, to, sizeof(to), &err))
			return fail(&err);
		DIR *d = opendir(from);
		struct dirent *de;
		while (d && (de = readdir(d))) {
			if (de->d_type != DT_REG)
				continue;
			snprintf(f1, sizeof(f1), "%s/%s", from, de->d_name);
			snprintf(f2, sizeof(f2), "%s/%s", to, de->d_name);
			if (copy_file(f1, f2)) {
				fprintf(stderr, "image_graft: cannot copy '%s'\n", f1);
				return 1;
			}
		}
		if (d)
			closedir(d);
	}
	if (image_test_writer_commit(w, &err))
		return fail(&err);
	gs_image_close(img);
	return 0;
}
