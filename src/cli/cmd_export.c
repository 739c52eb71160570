/*
 * cmd_export.c - `gpusnap export SRC DEST`: an image made self-contained in
 * DEST, to copy elsewhere: an incremental image (dump --parent) with every
 * chunk its chain holds read through the chain and written into DEST, so
 * DEST needs none of SRC's parents; compressed chunks are written as DEST's
 * codec says (--compress; default: uncompressed). CRIU's files are copied
 * as they are and checksummed again when DEST is published. SRC is held for
 * reading meanwhile (a dump replacing it waits) and every chunk is checked
 * as it is read (its CRC, through the chain), so DEST is only published
 * whole. DEST follows dump's rules for DIR (image.h: gs_image_tmp_create):
 * absent, empty, or an image of the same process. An image of a process
 * tree is exported part by part (each procs/<pid>/ as an image of one
 * process), its own manifest last and without the store its parts used.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/dump_tree.h"
#include "common/util.h"
#include "core/fingerprint.h"
#include "image/codec.h"
#include "image/image.h"
#include "image/image_fs.h"

static const char *const export_usage[] = {
	"gpusnap export [--compress CODEC[:LEVEL]] [--replace] [--json] SRC DEST",
	NULL,
};

const struct cli_doc export_doc = {
	.args = "SRC DEST",
	.description =
		"Writes the image SRC into DEST as one self-contained image: an incremental image's chunks are read "
		"through its chain of parents (dump --parent) and stored in DEST, so DEST can be copied elsewhere, "
		"and restored, without SRC's parents. CRIU's files are copied. Every chunk is checked as it is read; "
		"DEST is published only once it is complete, as a dump publishes its image.\n\n"
		"--compress writes DEST's chunks compressed (as dump --compress); without it they are stored as "
		"they are. An image of a process tree (dump --tree) is exported whole, each of its processes' images so.",
	.exits = (const struct cli_doc_exit[]){ { GS_E_FAILURE, "an I/O error writing DEST; DEST stays as it was" },
						{ GS_E_USAGE, "bad options; DEST not an image and not empty; DEST the image of "
							      "another process without --replace" },
						{ GS_E_PERMISSION, "an image path that others could change (named)" },
						{ GS_E_STATE, "another gpusnap is writing DEST (named)" },
						{ GS_E_IMAGE, "SRC missing, corrupt, of an unknown version, a chunk's checksum "
							      "wrong, or its chain of parents broken (the link is named)" },
						{ GS_E_NO_SPACE, "DEST's file system is full; DEST stays as it was" },
						{ 0, NULL } },
	.env = "GPUSNAP_LOG",
	.examples = (const struct cli_doc_example[]){
		{ "gpusnap export /ckpt/series/0005 /mnt/usb/job", "One directory holding the fifth image of a series." },
		{ NULL, NULL } },
};

/* Copies the regular files and directories under from (a directory descriptor) into to, recursively. */
static int copy_tree(int from, int to, const char *where, int depth, struct gs_err *err)
{
	if (depth > 16)
		return gs_fail(err, GS_E_IMAGE, "'%s' is nested deeper than an image may be", where);
	int dfd = dup(from);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (!d) {
		if (dfd >= 0)
			close(dfd);
		return gs_fail_errno(err, GS_E_FAILURE, errno, "cannot read '%s'", where);
	}
	rewinddir(d);
	int rc = 0;
	struct dirent *e;
	char buf[1 << 16];
	while (!rc && (e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		struct stat st;
		if (fstatat(from, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			rc = gs_fail_errno(err, GS_E_FAILURE, errno, "cannot stat '%s/%s'", where, e->d_name);
			break;
		}
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/%s", where, e->d_name);
		if (S_ISDIR(st.st_mode)) {
			int s = openat(from, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), t = -1;
			if (s < 0 || (mkdirat(to, e->d_name, 0700) < 0 && errno != EEXIST) ||
			    (t = openat(to, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
				rc = gs_fail_errno(err, errno == ENOSPC ? GS_E_NO_SPACE : GS_E_FAILURE, errno, "copying '%s'", path);
			else
				rc = copy_tree(s, t, path, depth + 1, err);
			if (s >= 0)
				close(s);
			if (t >= 0)
				close(t);
			continue;
		}
		if (!S_ISREG(st.st_mode)) {
			rc = gs_fail(err, GS_E_IMAGE, "'%s' is neither a file nor a directory", path);
			break;
		}
		int s = openat(from, e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		int t = openat(to, e->d_name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (s < 0 || t < 0) {
			rc = gs_fail_errno(err, errno == ENOSPC ? GS_E_NO_SPACE : GS_E_FAILURE, errno, "copying '%s'", path);
		} else {
			for (uint64_t off = 0;;) {
				ssize_t n = pread(s, buf, sizeof(buf), (off_t)off);
				if (n < 0 && errno == EINTR)
					continue;
				if (n < 0) {
					rc = gs_fail_errno(err, GS_E_IMAGE, errno, "reading '%s'", path);
					break;
				}
				if (n == 0)
					break;
				int w = gs_fs_pwrite_full(t, buf, (size_t)n, off);
				if (w) {
					rc = gs_fail_errno(err, -w == ENOSPC || -w == EDQUOT ? GS_E_NO_SPACE : GS_E_FAILURE, -w,
							   "writing the copy of '%s'", path);
					break;
				}
				off += (uint64_t)n;
			}
		}
		if (s >= 0)
			close(s);
		if (t >= 0)
			close(t);
	}
	closedir(d);
	return rc;
}

/* SRC's GPUs, allocations, metadata and every chunk (read through its chain) into w. */
static int copy_gpu_part(struct gs_image *src, struct gs_image_writer *w, struct gs_err *err)
{
	int rc = 0;
	for (size_t i = 0; !rc && i < gs_image_gpu_count(src); i++)
		rc = gs_image_writer_add_gpu(w, gs_image_gpu_at(src, i), err);
	for (size_t i = 0; !rc && i < gs_image_allocation_count(src); i++)
		rc = gs_image_writer_add_allocation(w, gs_image_allocation_at(src, i), err);
	for (size_t i = 0; !rc && i < gs_image_metadata_count(src); i++)
		rc = gs_image_writer_set_metadata(w, gs_image_metadata_at(src, i)->key, gs_image_metadata_at(src, i)->value,
						 err);
	void *buf = NULL;
	size_t cap = 0;
	for (size_t i = 0; !rc && i < gs_image_chunk_count(src); i++) {
		const struct gs_image_chunk *c = gs_image_chunk_at(src, i);
		if (c->flags & GS_CHUNK_F_ZERO) {
			rc = gs_image_write_zero_chunk(w, c->alloc_id, c->offset, c->length, err);
			continue;
		}
		if (c->length > cap) {
			free(buf);
			cap = gs_round_up(c->length, GS_FMT_ALIGN);
			if (posix_memalign(&buf, GS_FMT_ALIGN, cap)) {
				buf = NULL;
				rc = gs_fail(err, GS_E_NO_SPACE, "out of memory (a chunk of %llu bytes)",
					     (unsigned long long)c->length);
				break;
			}
		}
		if ((rc = gs_image_read_chunk(src, i, buf, err)))
			break;
		struct gs_fp fp = { c->fp_lo, c->fp_hi };
		if (gs_fp_none(fp))
			fp = gs_fp_of(buf, c->length);
		rc = gs_image_write_chunk_fp(w, c->alloc_id, c->offset, buf, c->length, fp.lo, fp.hi, err);
	}
	free(buf);
	return rc;
}

/* What an export wrote, for its report. */
struct export_done {
	int32_t pid;
	struct gs_image_writer_stats st;
};

static void add_stats(struct gs_image_writer_stats *to, const struct gs_image_writer_stats *st)
{
	to->chunks += st->chunks;
	to->zero_chunks += st->zero_chunks;
	to->data_bytes += st->data_bytes;
	to->payload_bytes += st->payload_bytes;
	to->compressed_chunks += st->compressed_chunks;
}

/* A process's image of a tree's, src_dir/procs/<pid>, into the temporary image's procs/<pid>. */
static int export_part(const char *src_dir, pid_t pid, struct gs_image_tmp *t, const char *dest,
		       const struct gs_compress *cz, struct export_done *done, struct gs_err *err)
{
	char from[PATH_MAX], into[PATH_MAX], target[PATH_MAX];
	snprintf(from, sizeof(from), "%s/%s/%d", src_dir, DUMP_TREE_PROCS_DIR, (int)pid);
	snprintf(into, sizeof(into), "%s/%s/%d", gs_image_tmp_path(t), DUMP_TREE_PROCS_DIR, (int)pid);
	snprintf(target, sizeof(target), "%s/%s/%d", dest, DUMP_TREE_PROCS_DIR, (int)pid);
	struct gs_image *src = NULL;
	int rc = gs_image_open(from, &src, err);
	if (rc)
		return rc;
	if (mkdir(into, 0700) < 0) {
		rc = gs_fail_errno(err, errno == ENOSPC ? GS_E_NO_SPACE : GS_E_FAILURE, errno, "cannot create '%s'", into);
		gs_image_close(src);
		return rc;
	}
	const struct gs_image_info *in = gs_image_get_info(src);
	struct gs_image_writer_opts wo = { .source_pid = in->source_pid, .source_comm = in->source_comm, .how = in->how,
					   .target = target, .no_data_sync = true, .compress_codec = cz->codec,
					   .compress_level = cz->level };
	struct gs_image_writer *w = NULL;
	if (!(rc = gs_image_writer_open_in(into, &wo, &w, err)) && !(rc = copy_gpu_part(src, w, err))) {
		struct gs_image_writer_stats st;
		gs_image_writer_stats(w, &st);
		add_stats(&done->st, &st);
		rc = gs_image_writer_seal(w, err);
		w = NULL;
	}
	gs_image_writer_abort(w);
	gs_image_close(src);
	return rc;
}

/* A process tree's image: each process's part, then the tree's own manifest (GPUs, metadata). */
static int export_parts(struct gs_image *src, const char *src_dir, struct gs_image_tmp *t, const char *dest,
			const struct gs_compress *cz, struct export_done *done, struct gs_err *err)
{
	pid_t *pids = NULL;
	int n = 0;
	int rc = dump_tree_parse_pids(gs_image_metadata_get(src, DUMP_TREE_META_PIDS), &pids, &n, err);
	if (rc)
		return rc;
	char procs[PATH_MAX];
	snprintf(procs, sizeof(procs), "%s/%s", gs_image_tmp_path(t), DUMP_TREE_PROCS_DIR);
	if (mkdir(procs, 0700) < 0)
		rc = gs_fail_errno(err, errno == ENOSPC ? GS_E_NO_SPACE : GS_E_FAILURE, errno, "cannot create '%s'", procs);
	for (int i = 0; !rc && i < n; i++)
		rc = export_part(src_dir, pids[i], t, dest, cz, done, err);
	free(pids);
	return rc;
}

static int export_image(const char *src_dir, const char *dest, const struct gs_compress *cz, bool replace,
			struct export_done *done, struct gs_err *err)
{
	struct gs_image *src = NULL;
	struct gs_image_tmp *t = NULL;
	struct gs_image_writer *w = NULL;
	int rc = gs_image_open_held(src_dir, &src, err);
	if (rc)
		return rc;
	const struct gs_image_info *in = gs_image_get_info(src);
	bool tree = !strcmp(in->how, DUMP_TREE_HOW);
	struct gs_image_tmp_opts to = { .source_pid = in->source_pid, .source_comm = in->source_comm, .replace = replace };
	if ((rc = gs_image_tmp_create(dest, &to, &t, err)))
		goto out;
	if (in->cpu_state) {
		char from[PATH_MAX], into[PATH_MAX];
		if ((rc = gs_image_cpu_dir_fd_path(src, from, sizeof(from), err)) ||
		    (rc = gs_image_tmp_cpu_dir(t, into, sizeof(into), err)))
			goto out;
		int f = open(from, O_RDONLY | O_DIRECTORY | O_CLOEXEC), d = open(into, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		char where[PATH_MAX];
		snprintf(where, sizeof(where), "%s/cpu", src_dir);
		rc = f < 0 || d < 0 ? gs_fail_errno(err, GS_E_FAILURE, errno, "cannot open '%s'", f < 0 ? from : into)
				    : copy_tree(f, d, where, 0, err);
		if (f >= 0)
			close(f);
		if (d >= 0)
			close(d);
		if (rc)
			goto out;
	}
	struct gs_image_writer_opts wo = { .source_pid = in->source_pid, .source_comm = in->source_comm, .how = in->how,
					   .target = dest, .no_data_sync = true, .compress_codec = cz->codec,
					   .compress_level = cz->level };
	/* a tree's parts first: its own manifest, written last, makes the image */
	if ((tree && (rc = export_parts(src, src_dir, t, dest, cz, done, err))) ||
	    (rc = gs_image_writer_open_in(gs_image_tmp_path(t), &wo, &w, err)) || (rc = copy_gpu_part(src, w, err)))
		goto out;
	done->pid = in->source_pid;
	struct gs_image_writer_stats st;
	gs_image_writer_stats(w, &st);
	add_stats(&done->st, &st);
	rc = gs_image_writer_seal(w, err);
	w = NULL;
	if (rc)
		goto out;
	bool published = false;
	if ((rc = gs_image_publish(t, &published, err)) && !published)
		goto out;
	gs_image_tmp_close(t);
	t = NULL;
out:
	gs_image_writer_abort(w);
	gs_image_tmp_discard(t);
	gs_image_close(src);
	return rc;
}

int cmd_export(int argc, char **argv)
{
	const char *compress_arg = NULL;
	bool replace = false, json = false;
	const struct gs_option opts[] = {
		GS_OPT_STRING_(0, "compress", &compress_arg, "CODEC[:LEVEL]",
			       "store DEST's chunks compressed: lz4 (levels 1-12) or zstd (levels 1-22)"),
		GS_OPT_BOOL_(0, "replace", &replace, "replace DEST even if it holds the image of another process"),
		GS_OPT_BOOL_(0, "json", &json, "print the outcome as JSON"),
		GS_OPT_END_(),
	};
	int nargs;
	int rc = cli_parse(argc, argv, opts, export_usage, 0, &nargs);
	if (rc)
		return rc == GS_PARSE_HELP ? 0 : rc;
	if ((rc = cli_want_args("export", argv, nargs, 2, "SRC DEST")))
		return rc;
	struct gs_compress cz = { 0 };
	struct gs_err err = { 0 };
	if (compress_arg && gs_compress_parse(compress_arg, &cz, &err))
		return cli_usage_error("export", "--compress: %s", err.msg);
	char src[PATH_MAX], dest[PATH_MAX];
	if (!realpath(argv[0], src))
		snprintf(src, sizeof(src), "%s", argv[0]); /* the open names what is missing */
	if (argv[1][0] != '/') {
		char cwd[PATH_MAX / 2];
		if (!getcwd(cwd, sizeof(cwd)) || (size_t)snprintf(dest, sizeof(dest), "%s/%s", cwd, argv[1]) >= sizeof(dest))
			return cli_usage_error("export", "cannot make '%s' an absolute path", argv[1]);
	} else {
		snprintf(dest, sizeof(dest), "%s", argv[1]);
	}
	if (!strcmp(src, dest))
		return cli_usage_error("export", "SRC and DEST are the same directory");
	struct export_done done = { 0 };
	double t0 = gs_now();
	if ((rc = export_image(src, dest, &cz, replace, &done, &err)))
		return cli_report_error(&err);
	if (!json) {
		printf("exported '%s' into '%s'\n", src, dest);
		return 0;
	}
	struct gs_json j;
	cli_json_begin_outcome(&j, "export", 0, NULL);
	gs_json_kv_string(&j, "src", src);
	gs_json_kv_string(&j, "dest", dest);
	gs_json_kv_int(&j, "pid", done.pid);
	gs_json_kv_string(&j, "compress", gs_codec_name(cz.codec));
	gs_json_kv_uint(&j, "chunks", done.st.chunks);
	gs_json_kv_uint(&j, "zero_chunks", done.st.zero_chunks);
	gs_json_kv_uint(&j, "data_bytes", done.st.data_bytes);
	gs_json_kv_uint(&j, "stored_bytes", done.st.payload_bytes);
	gs_json_kv_uint(&j, "compressed_chunks", done.st.compressed_chunks);
	gs_json_kv_double(&j, "total_s", gs_now() - t0);
	gs_json_object_end(&j);
	cli_json_print(&j);
	return 0;
}
