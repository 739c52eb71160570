/*
 * image_reader.c - opening, validating, reading and verifying an image (see
 * image.h).
 *
 * The image directory is reached by a walk from '/' that checks every
 * directory above it (image_fs.h: gs_fs_open_dir_checked), so nobody but its
 * owner and root can swap it after the checks. Everything inside is checked
 * without following anything (no symlinks, FIFOs, devices, hard links) and
 * opened relative to the directory's descriptor with O_NOFOLLOW | O_NONBLOCK,
 * then fstat'ed before a byte is read: nothing in the image can make the
 * reader look outside it or wait. All data files stay open for the image's
 * life: an image replaced by a new dump meanwhile is still read whole, from
 * the old files. cpu/ stays open too, for CRIU (gs_image_cpu_dir_fd_path).
 * An incremental image holds its parent open (and so the whole chain, each
 * link checked by open_parent); its PARENT chunks are read there. Compressed
 * chunks are checked as stored, decompressed (codec.h), checked again.
 */
#define LOG_PREFIX "image: "
#include "image/image.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fault.h"
#include "common/log.h"
#include "common/util.h"
#include "core/fingerprint.h"
#include "image/codec.h"
#include "image/cpu_list.h"
#include "image/crc32c.h"
#include "image/image_fs.h"
#include "image/image_tmp.h"
#include "image/manifest.h"
#include "image/store.h"

#define VERIFY_PIECE (8 * GS_MiB) /* read size of gs_image_verify; chunks are checked piece by piece */
#define MAX_IO (1ULL << 30)
/* gs_image_read_chunk reads and checksums in pieces of this (a multiple of GS_FMT_ALIGN, fits in L2) */
#define READ_PIECE (1ULL << 20)
/* gs_image_open_held: how long a publish holding the image is waited for, and how often it is reopened */
#define HOLD_WAIT_S 5.0
#define HOLD_ROUNDS 3

struct reader_file {
	int fd;        /* buffered reads */
	int direct_fd; /* O_DIRECT reads, or -1 */
	atomic_bool direct_ok;
};

struct gs_image {
	char *path;
	int dir_fd;
	int cpu_fd; /* cpu/, or -1 without CPU state */
	struct gs_manifest m;
	struct reader_file *files;
	atomic_bool direct_io;
	bool verify_fp;              /* gs_image_verify checks fingerprints too */
	struct gs_image *parent;     /* an incremental image's parent, opened and checked with it (its chain) */
	struct gs_store *store;      /* the chunk store of its STORED chunks, opened and checked with it */
	char *store_path;            /* where that store was found (the record resolved) */
	bool cpu_listed;             /* cpu-files.img lists cpu/'s files (else: an image from before the list) */
	struct gs_cpu_list cpu_list; /* its contents */
};

/*
 * Reads a small file of the image whole (at most max bytes) into *buf
 * (malloc'd), after gs_fs_open_file's checks. *missing as there.
 */
static int read_whole(int dir_fd, const char *name, const char *path, uint64_t max, const char *what, void **buf,
		      size_t *len, bool *missing, struct gs_err *err)
{
	*buf = NULL;
	int fd;
	struct stat st;
	int rc = gs_fs_open_file(dir_fd, name, path, &fd, &st, missing, err);
	if (rc)
		return rc;
	if ((uint64_t)st.st_size > max) {
		rc = gs_fail(err, GS_E_IMAGE, "'%s' is %lld bytes, more than the %llu MiB %s may be", path,
			     (long long)st.st_size, (unsigned long long)(max / GS_MiB), what);
		goto out;
	}
	*len = (size_t)st.st_size;
	*buf = malloc(*len ? *len : 1);
	if (!*buf) {
		rc = gs_fail(err, GS_E_NO_SPACE, "out of memory for a %zu-byte %s", *len, what);
		goto out;
	}
	int e = gs_fault(GS_FI_IMAGE_READ) ? -gs_fault_errno(GS_FI_IMAGE_READ, EIO) : gs_fs_pread_full(fd, *buf, *len, 0);
	if (e) {
		rc = e == -EIO ? gs_fail_errno(err, GS_E_IMAGE, EIO, "cannot read '%s' (shrank while being read?)", path)
			       : gs_fail_errno(err, GS_E_FAILURE, -e, "cannot read '%s'", path);
		free(*buf);
		*buf = NULL;
	}
out:
	close(fd);
	return rc;
}

int gs_manifest_read_at(int dir_fd, const char *dir_path, struct gs_manifest *m, struct gs_err *err)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/%s", dir_path, GS_FMT_MANIFEST_NAME);
	void *buf;
	size_t len = 0;
	bool missing;
	int rc = read_whole(dir_fd, GS_FMT_MANIFEST_NAME, path, GS_FMT_MANIFEST_MAX, "a manifest", &buf, &len, &missing,
			    err);
	if (rc && missing)
		return gs_fail(err, GS_E_IMAGE, "'%s' is not a gpusnap image (no " GS_FMT_MANIFEST_NAME ")", dir_path);
	if (rc)
		return rc;
	rc = gs_manifest_decode(buf, len, m, err); /* owns buf from here */
	if (rc)
		gs_err_wrap(err, "image '%s'", dir_path);
	return rc;
}

uint32_t gs_manifest_crc32c(const struct gs_manifest *m)
{
	uint32_t crc = 0;
	if (m->raw && m->raw_len >= sizeof(crc))
		memcpy(&crc, (const char *)m->raw + m->raw_len - sizeof(crc), sizeof(crc));
	return crc;
}

static int open_data_file(struct gs_image *img, size_t i, struct gs_err *err)
{
	const struct gs_image_data_file *f = &img->m.files[i];
	struct reader_file *rf = &img->files[i];
	char path[4200];
	snprintf(path, sizeof(path), "%s/%s", img->path, f->name);
	struct stat st;
	bool missing;
	int rc = gs_fs_open_file(img->dir_fd, f->name, path, &rf->fd, &st, &missing, err);
	if (rc && missing)
		return gs_fail(err, GS_E_IMAGE, "image '%s': data file '%s' is missing", img->path, f->name);
	if (rc)
		return rc;
	if ((uint64_t)st.st_size < f->size)
		return gs_fail(err, GS_E_IMAGE, "image '%s': data file '%s' is truncated: %lld of %" PRIu64 " bytes",
			       img->path, f->name, (long long)st.st_size, f->size);
	if ((uint64_t)st.st_size > f->size)
		return gs_fail(err, GS_E_IMAGE, "image '%s': data file '%s' is %lld bytes, the manifest says %" PRIu64,
			       img->path, f->name, (long long)st.st_size, f->size);
	unsigned char header[sizeof(struct gs_fmt_data_header)];
	int e = gs_fs_pread_full(rf->fd, header, sizeof(header), 0);
	if (e)
		return gs_fail_errno(err, GS_E_FAILURE, -e, "cannot read '%s'", path);
	if ((rc = gs_fmt_data_header_check(header, sizeof(header), img->m.info.format_version, img->m.info.image_id,
					   f->index, f->name, err)))
		return gs_err_wrap(err, "image '%s'", img->path);

	rf->direct_fd = openat(img->dir_fd, f->name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_DIRECT | O_CLOEXEC);
	struct stat dst;
	if (rf->direct_fd >= 0 && (fstat(rf->direct_fd, &dst) < 0 || dst.st_ino != st.st_ino || dst.st_dev != st.st_dev)) {
		close(rf->direct_fd); /* replaced between the two opens: read everything through the checked one */
		rf->direct_fd = -1;
	}
	atomic_init(&rf->direct_ok, rf->direct_fd >= 0);
	return 0;
}

/* cpu-files.img: read, decoded, of this manifest; cpu_listed stays false where the image has none. */
static int read_cpu_list(struct gs_image *img, struct gs_err *err)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/%s", img->path, GS_FMT_CPU_LIST_NAME);
	void *buf;
	size_t len = 0;
	bool missing;
	struct gs_err e = { 0 };
	int rc = read_whole(img->dir_fd, GS_FMT_CPU_LIST_NAME, path, GS_FMT_CPU_LIST_MAX, "a list of CPU files", &buf,
			    &len, &missing, &e);
	if (rc && missing)
		return 0; /* an image from before the list */
	if (rc) {
		if (err)
			*err = e;
		return rc;
	}
	if (!img->m.info.cpu_state) {
		free(buf);
		return gs_fail(err, GS_E_IMAGE, "image '%s' lists CPU files but holds no CPU state", img->path);
	}
	if ((rc = gs_cpu_list_decode(buf, len, &img->cpu_list, err)))
		return gs_err_wrap(err, "image '%s': %s", img->path, GS_FMT_CPU_LIST_NAME);
	img->cpu_listed = true;
	if (memcmp(img->cpu_list.image_id, img->m.info.image_id, 16) ||
	    img->cpu_list.manifest_crc32c != gs_manifest_crc32c(&img->m))
		return gs_fail(err, GS_E_IMAGE, "image '%s': %s belongs to another image (or another manifest)", img->path,
			       GS_FMT_CPU_LIST_NAME);
	return 0;
}

static int check_cpu_state(struct gs_image *img, struct gs_err *err)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/%s", img->path, GS_FMT_CPU_DIR_NAME);
	struct stat st;
	if (fstatat(img->dir_fd, GS_FMT_CPU_DIR_NAME, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return gs_fail(err, GS_E_IMAGE, "image '%s' says it holds CPU state, but '%s' is missing", img->path, path);
	if (!S_ISDIR(st.st_mode))
		return gs_fail(err, GS_E_IMAGE, "image '%s': '%s' is not a directory", img->path, path);
	img->cpu_fd = openat(img->dir_fd, GS_FMT_CPU_DIR_NAME, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (img->cpu_fd < 0)
		return gs_fail_errno(err, errno == EACCES ? GS_E_PERMISSION : GS_E_IMAGE, errno, "cannot open '%s'", path);
	struct stat fst;
	if (fstat(img->cpu_fd, &fst) < 0 || fst.st_ino != st.st_ino || fst.st_dev != st.st_dev)
		return gs_fail(err, GS_E_IMAGE, "image '%s': '%s' was replaced while it was being opened", img->path, path);
	/* CRIU restores whatever these files say: they must be as trusted as ours, and be the files the dump left */
	struct gs_cpu_scan scan;
	int rc = gs_fs_check_entry(&fst, path, err);
	if (!rc)
		rc = gs_cpu_scan(img->cpu_fd, path, &scan, err);
	if (!rc && img->cpu_listed)
		rc = gs_cpu_list_match(&img->cpu_list, &scan, img->path, err);
	gs_cpu_scan_free(&scan);
	return rc;
}

/*
 * A shared flock on the image directory img->dir_fd, for gs_image_open_held:
 * a publish holding it exclusively (replacing this image, or ending its own
 * publish of it) is waited for up to HOLD_WAIT_S, said once on stderr. -1
 * when the directory at dir is another one by the time the lock is had (a
 * publish replaced it: open again); 0 held (or a file system without flock:
 * read unheld, as before the lock existed); an error code otherwise.
 */
static int hold_dir(struct gs_image *img, const char *dir, struct gs_err *err)
{
	double t0 = gs_now();
	bool said = false;
	while (flock(img->dir_fd, LOCK_SH | LOCK_NB) < 0) {
		if (errno == EINTR)
			continue;
		if (errno != EWOULDBLOCK) {
			pr_debug("'%s' read without its lock: %s", dir, strerror(errno));
			return 0;
		}
		char who[128];
		gs_fs_flock_holder(img->dir_fd, who, sizeof(who), NULL);
		if (gs_now() - t0 > HOLD_WAIT_S)
			return gs_fail(err, GS_E_STATE, "image '%s' is being written by %s; try again when it has finished",
				       dir, who);
		if (!said)
			pr_warn("waiting for %s, which is publishing '%s'", who, dir);
		said = true;
		usleep(20000);
	}
	struct stat held, named;
	if (fstat(img->dir_fd, &held) < 0 || stat(dir, &named) < 0 || held.st_ino != named.st_ino ||
	    held.st_dev != named.st_dev)
		return -1;
	return 0;
}

/* The images of a chain being opened, the newest first: their ids, to find a loop. */
struct chain {
	uint8_t ids[GS_FMT_CHAIN_MAX][16];
	size_t n;
	bool link_failed; /* the error is a broken link's, already naming it */
	bool partial;     /* the caller reads a partial image (gs_image_open_partial); never its parents */
};

static int image_open(const char *dir, bool hold, struct chain *ch, struct gs_image **imgp, struct gs_err *err);

int gs_image_open(const char *dir, struct gs_image **imgp, struct gs_err *err)
{
	struct chain ch = { .n = 0 };
	return image_open(dir, false, &ch, imgp, err);
}

int gs_image_open_partial(const char *dir, struct gs_image **imgp, struct gs_err *err)
{
	struct chain ch = { .n = 0, .partial = true };
	return image_open(dir, false, &ch, imgp, err);
}

/* A broken link of img's chain: one line naming the image and its parent. */
#define LINK_FAIL(ch, ...) ((ch)->link_failed = true, gs_fail(err, GS_E_IMAGE, __VA_ARGS__))

static bool same_gpus(const struct gs_manifest *a, const struct gs_manifest *b)
{
	if (a->ngpus != b->ngpus)
		return false;
	for (size_t i = 0; i < a->ngpus; i++) {
		const struct gs_image_gpu *x = &a->gpus[i], *y = &b->gpus[i];
		if (x->index != y->index || memcmp(x->uuid, y->uuid, 16) || x->cc_major != y->cc_major ||
		    x->cc_minor != y->cc_minor || x->total_memory != y->total_memory)
			return false;
	}
	return true;
}

/*
 * Opens and checks img's parent (FORMAT.md 4.11) and, through it, the rest
 * of the chain: present and readable, not a loop, of the same process and
 * GPUs, the very image img was taken against, and holding every chunk img
 * refers to with the same length, checksum and fingerprint.
 */
static int open_parent(struct gs_image *img, struct chain *ch, struct gs_err *err)
{
	const struct gs_image_parent *pr = &img->m.parent;
	char path[PATH_MAX];
	if (pr->path[0] == '/') {
		snprintf(path, sizeof(path), "%s", pr->path);
	} else {
		/* the directory holding img's: through "..", which also resolves a /proc/self/fd/N/. the agent is given */
		char up[PATH_MAX], base[PATH_MAX];
		snprintf(up, sizeof(up), "%s/..", img->path);
		if (!realpath(up, base))
			snprintf(base, sizeof(base), "%s", up);
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", strcmp(base, "/") ? base : "", pr->path) >= sizeof(path))
			return LINK_FAIL(ch, "image '%s': the path of its parent '%s' is too long", img->path, pr->path);
	}
	if (ch->n >= GS_FMT_CHAIN_MAX)
		return LINK_FAIL(ch, "image '%s': its chain of parents is longer than %u images (at '%s')", img->path,
				 GS_FMT_CHAIN_MAX, path);
	struct stat st;
	if (lstat(path, &st) < 0 && errno == ENOENT)
		return LINK_FAIL(ch, "image '%s': its parent '%s' is missing", img->path, path);
	struct gs_image *p = NULL;
	int rc = image_open(path, false, ch, &p, err);
	if (rc) {
		if (!ch->link_failed) {
			gs_err_wrap(err, "image '%s': its parent '%s' cannot be read", img->path, path);
			if (err)
				err->code = GS_E_IMAGE;
			ch->link_failed = true;
			rc = GS_E_IMAGE;
		}
		return rc;
	}
	img->parent = p;
	const struct gs_image_info *a = &img->m.info, *b = &p->m.info;
	if (a->source_pid != b->source_pid || strcmp(a->source_comm, b->source_comm))
		return LINK_FAIL(ch, "image '%s': its parent '%s' is an image of process %d (%s), this one of process %d (%s)",
				 img->path, path, (int)b->source_pid, b->source_comm, (int)a->source_pid, a->source_comm);
	if (!same_gpus(&img->m, &p->m))
		return LINK_FAIL(ch, "image '%s': its parent '%s' was taken on other GPUs (%zu listed, this one %zu)",
				 img->path, path, p->m.ngpus, img->m.ngpus);
	if (memcmp(pr->image_id, b->image_id, 16) || pr->manifest_crc32c != gs_manifest_crc32c(&p->m))
		return LINK_FAIL(ch, "image '%s': its parent '%s' is not the image it was taken against (replaced or changed "
				 "since)", img->path, path);
	for (size_t k = 0; k < img->m.nchunks; k++) {
		const struct gs_image_chunk *c = &img->m.chunks[k];
		if (!(c->flags & GS_CHUNK_F_PARENT))
			continue;
		const struct gs_image_chunk *q = c->file_offset < p->m.nchunks ? &p->m.chunks[c->file_offset] : NULL;
		if (!q || (q->flags & GS_CHUNK_F_ZERO) || q->length != c->length || q->crc32c != c->crc32c ||
		    q->fp_lo != c->fp_lo || q->fp_hi != c->fp_hi)
			return LINK_FAIL(ch, "image '%s': chunk %zu (allocation %" PRIu64 ", offset %" PRIu64 ") refers to "
					 "chunk %" PRIu64 " of its parent '%s', which %s", img->path, k, c->alloc_id, c->offset,
					 c->file_offset, path, q ? "holds other data" : "does not exist");
	}
	return 0;
}

/* A path an image records (parent, store): absolute, or relative to the directory holding img's directory. */
static int resolve_recorded(const struct gs_image *img, const char *rec, char *path, size_t n)
{
	if (rec[0] == '/')
		return (size_t)snprintf(path, n, "%s", rec) >= n ? -1 : 0;
	/* the directory holding img's: through "..", which also resolves a /proc/self/fd/N/. the agent is given */
	char up[PATH_MAX], base[PATH_MAX];
	snprintf(up, sizeof(up), "%s/..", img->path);
	if (!realpath(up, base))
		snprintf(base, sizeof(base), "%s", up);
	return (size_t)snprintf(path, n, "%s/%s", strcmp(base, "/") ? base : "", rec) >= n ? -1 : 0;
}

static struct gs_store_object chunk_object(const struct gs_image_chunk *c)
{
	return (struct gs_store_object){ .length = c->length, .crc32c = c->crc32c, .fp_lo = c->fp_lo, .fp_hi = c->fp_hi };
}

/*
 * Opens img's chunk store (FORMAT.md 4.12): there, trusted, the store the
 * image was written into (its id), and holding an object that agrees with
 * every STORED chunk's record. A missing or damaged object is named with
 * its chunk, before any data is used.
 */
static int open_store(struct gs_image *img, struct gs_err *err)
{
	char path[PATH_MAX];
	if (resolve_recorded(img, img->m.store.path, path, sizeof(path)))
		return gs_fail(err, GS_E_IMAGE, "image '%s': the path of its chunk store '%s' is too long", img->path,
			       img->m.store.path);
	/* a process tree's part records it from procs/<pid>/: said by its own path, not through ".." */
	char real[PATH_MAX];
	if (realpath(path, real))
		snprintf(path, sizeof(path), "%s", real);
	int rc = gs_store_open(path, false, &img->store, err);
	if (rc) {
		gs_err_wrap(err, "image '%s': its chunk store", img->path);
		return rc;
	}
	if (!(img->store_path = strdup(path)))
		return gs_image_oom(err, "an image's store");
	if (memcmp(gs_store_id(img->store), img->m.store.store_id, 16))
		return gs_fail(err, GS_E_IMAGE, "image '%s': '%s' is another chunk store than the one it was written into "
			       "(its id differs)", img->path, path);
	for (size_t k = 0; k < img->m.nchunks; k++) {
		const struct gs_image_chunk *c = &img->m.chunks[k];
		if (!(c->flags & GS_CHUNK_F_STORED))
			continue;
		struct gs_store_object want = chunk_object(c);
		char obj[PATH_MAX];
		if ((rc = gs_store_check_object(img->store, &want, obj, sizeof(obj), err))) {
			gs_err_wrap(err, "image '%s': chunk %zu (allocation %" PRIu64 ", offset %" PRIu64 ")", img->path, k,
				    c->alloc_id, c->offset);
			return rc;
		}
	}
	return 0;
}

const char *gs_image_store_path(const struct gs_image *img)
{
	return img->store_path;
}

int gs_image_open_held(const char *dir, struct gs_image **imgp, struct gs_err *err)
{
	/* each round a publish replaced the image between the open and the lock: the new one is opened */
	for (int round = 0;; round++) {
		struct chain ch = { .n = 0 };
		int rc = image_open(dir, true, &ch, imgp, err);
		if (rc != -1)
			return rc;
		if (round >= HOLD_ROUNDS)
			return gs_fail(err, GS_E_STATE, "image '%s' was replaced %d times while being opened; try again",
				       dir, HOLD_ROUNDS + 1);
	}
}

/* -1 (hold only): the directory was replaced before it was locked, nothing is open. */
static int image_open(const char *dir, bool hold, struct chain *ch, struct gs_image **imgp, struct gs_err *err)
{
	*imgp = NULL;
	struct gs_image *img = calloc(1, sizeof(*img));
	if (!img || !(img->path = strdup(dir))) {
		free(img);
		return gs_fail(err, GS_E_NO_SPACE, "out of memory opening an image");
	}
	atomic_init(&img->direct_io, true);
	img->dir_fd = img->cpu_fd = -1;
	struct stat st;
	int rc = gs_fs_open_dir_checked(dir, dir, &img->dir_fd, &st, err);
	if (rc < 0) {
		int e = -rc;
		if (e == ENOENT)
			rc = gs_fail(err, GS_E_IMAGE, "no image at '%s': no such directory", dir);
		else if (e == ENOTDIR)
			rc = gs_fail(err, GS_E_IMAGE, "'%s' is not a gpusnap image (not a directory)", dir);
		else
			rc = gs_fail_errno(err, e == EACCES || e == EPERM ? GS_E_PERMISSION : GS_E_FAILURE, e,
					   "cannot open '%s'", dir);
		goto fail;
	}
	if (rc)
		goto fail;
	/* locked before anything in it is read: a publish removes the files of the image it replaced */
	if (hold && (rc = hold_dir(img, dir, err)) < 0) {
		gs_image_close(img);
		return -1;
	}
	if (rc)
		goto fail;
	/* the directory, then everything in it, before any file is opened: a FIFO or a link anywhere is refused */
	if ((rc = gs_fs_check_trusted(&st, dir, err)) || (rc = gs_fs_check_tree_trusted(img->dir_fd, ".", dir, err)) ||
	    (rc = gs_manifest_read_at(img->dir_fd, dir, &img->m, err)) || (rc = read_cpu_list(img, err)))
		goto fail;
	size_t elsewhere = 0;
	for (size_t i = 0; i < img->m.nchunks; i++)
		elsewhere += (img->m.chunks[i].flags & GS_CHUNK_F_ELSEWHERE) != 0;
	if (elsewhere && !(ch->partial && ch->n == 0)) {
		/* a suspend's spill whose other part stayed in the process's memory: never to be taken for a whole image */
		rc = gs_fail(err, GS_E_IMAGE, "'%s' holds only part of a process's GPU data (%zu of its %zu chunks are "
			     "elsewhere: a suspend's spill whose rest is in the process's host memory); only "
			     "gpusnap resume of that process reads it", dir, elsewhere, img->m.nchunks);
		goto fail;
	}
	if (img->m.nfiles) {
		img->files = calloc(img->m.nfiles, sizeof(*img->files));
		if (!img->files) {
			rc = gs_fail(err, GS_E_NO_SPACE, "out of memory opening '%s'", dir);
			goto fail;
		}
		for (size_t i = 0; i < img->m.nfiles; i++)
			img->files[i].fd = img->files[i].direct_fd = -1;
		for (size_t i = 0; i < img->m.nfiles; i++)
			if ((rc = open_data_file(img, i, err)))
				goto fail;
	}
	if (img->m.info.cpu_state && (rc = check_cpu_state(img, err)))
		goto fail;
	/* a chain: a loop is found by the ids before anything of it is opened twice */
	for (size_t i = 0; i < ch->n; i++)
		if (!memcmp(ch->ids[i], img->m.info.image_id, 16)) {
			rc = LINK_FAIL(ch, "the chain of parents loops back to image '%s'", dir);
			goto fail;
		}
	if (ch->n < GS_FMT_CHAIN_MAX)
		memcpy(ch->ids[ch->n++], img->m.info.image_id, 16);
	if (img->m.has_store && (rc = open_store(img, err)))
		goto fail;
	if (img->m.has_parent && (rc = open_parent(img, ch, err)))
		goto fail;
	*imgp = img;
	return 0;
fail:
	gs_image_close(img);
	return rc;
}

void gs_image_close(struct gs_image *img)
{
	if (!img)
		return;
	if (img->files) {
		for (size_t i = 0; i < img->m.nfiles; i++) {
			if (img->files[i].fd >= 0)
				close(img->files[i].fd);
			if (img->files[i].direct_fd >= 0)
				close(img->files[i].direct_fd);
		}
		free(img->files);
	}
	if (img->dir_fd >= 0)
		close(img->dir_fd);
	if (img->cpu_fd >= 0)
		close(img->cpu_fd);
	gs_cpu_list_free(&img->cpu_list);
	gs_image_close(img->parent);
	gs_store_close(img->store);
	free(img->store_path);
	gs_manifest_free(&img->m);
	free(img->path);
	free(img);
}

/* ------------------------------------------------------------ accessors */

const char *gs_image_path(const struct gs_image *img) { return img->path; }
const struct gs_image_info *gs_image_get_info(const struct gs_image *img) { return &img->m.info; }
size_t gs_image_gpu_count(const struct gs_image *img) { return img->m.ngpus; }
size_t gs_image_allocation_count(const struct gs_image *img) { return img->m.nallocs; }
size_t gs_image_chunk_count(const struct gs_image *img) { return img->m.nchunks; }
size_t gs_image_data_file_count(const struct gs_image *img) { return img->m.nfiles; }
size_t gs_image_metadata_count(const struct gs_image *img) { return img->m.nmeta; }

const struct gs_image_gpu *gs_image_gpu_at(const struct gs_image *img, size_t i)
{
	return i < img->m.ngpus ? &img->m.gpus[i] : NULL;
}

const struct gs_image_allocation *gs_image_allocation_at(const struct gs_image *img, size_t i)
{
	return i < img->m.nallocs ? &img->m.allocs[i] : NULL;
}

const struct gs_image_chunk *gs_image_chunk_at(const struct gs_image *img, size_t i)
{
	return i < img->m.nchunks ? &img->m.chunks[i] : NULL;
}

const struct gs_image_data_file *gs_image_data_file_at(const struct gs_image *img, size_t i)
{
	return i < img->m.nfiles ? &img->m.files[i] : NULL;
}

const struct gs_image_kv *gs_image_metadata_at(const struct gs_image *img, size_t i)
{
	return i < img->m.nmeta ? &img->m.meta[i] : NULL;
}

ptrdiff_t gs_image_find_allocation(const struct gs_image *img, uint64_t id)
{
	size_t lo = 0, hi = img->m.nallocs;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (img->m.allocs[mid].id == id)
			return (ptrdiff_t)mid;
		if (img->m.allocs[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

void gs_image_allocation_chunks(const struct gs_image *img, size_t i, size_t *first, size_t *count)
{
	if (i >= img->m.nallocs) {
		*first = *count = 0;
		return;
	}
	*first = img->m.alloc_chunk_start[i];
	*count = img->m.alloc_chunk_start[i + 1] - *first;
}

const char *gs_image_metadata_get(const struct gs_image *img, const char *key)
{
	for (size_t i = 0; i < img->m.nmeta; i++)
		if (!strcmp(img->m.meta[i].key, key))
			return img->m.meta[i].value;
	return NULL;
}

int gs_image_cpu_dir(const struct gs_image *img, char *path, size_t n, struct gs_err *err)
{
	if (!img->m.info.cpu_state)
		return gs_fail(err, GS_E_IMAGE, "image '%s' holds no CPU state", img->path);
	if ((size_t)snprintf(path, n, "%s/%s", img->path, GS_FMT_CPU_DIR_NAME) >= n)
		return gs_fail(err, GS_E_FAILURE, "path of '%s/%s' is too long", img->path, GS_FMT_CPU_DIR_NAME);
	return 0;
}

int gs_image_cpu_dir_fd_path(const struct gs_image *img, char *path, size_t n, struct gs_err *err)
{
	if (!img->m.info.cpu_state || img->cpu_fd < 0)
		return gs_fail(err, GS_E_IMAGE, "image '%s' holds no CPU state", img->path);
	if ((size_t)snprintf(path, n, "/proc/%d/fd/%d", (int)getpid(), img->cpu_fd) >= n)
		return gs_fail(err, GS_E_FAILURE, "no room for the path of '%s/%s'", img->path, GS_FMT_CPU_DIR_NAME);
	return 0;
}

bool gs_image_cpu_files(const struct gs_image *img, size_t *nfiles, uint64_t *bytes)
{
	if (nfiles)
		*nfiles = img->cpu_listed ? img->cpu_list.nfiles : 0;
	if (bytes)
		*bytes = img->cpu_listed ? img->cpu_list.bytes : 0;
	return img->cpu_listed;
}

int gs_image_require_cpu_list(const struct gs_image *img, struct gs_err *err)
{
	if (!img->m.info.cpu_state || img->cpu_listed)
		return 0;
	return gs_fail(err, GS_E_IMAGE, "image '%s' has no checksums of CRIU's files (no %s: kept by a dump killed "
		       "before it wrote them, or written by an older gpusnap), so its %s/ cannot be verified", img->path,
		       GS_FMT_CPU_LIST_NAME, GS_FMT_CPU_DIR_NAME);
}

void gs_image_set_verify_fingerprints(struct gs_image *img, bool on)
{
	for (; img; img = img->parent)
		img->verify_fp = on;
}

const struct gs_image *gs_image_parent(const struct gs_image *img)
{
	return img->parent;
}

uint32_t gs_image_manifest_crc32c(const struct gs_image *img)
{
	return gs_manifest_crc32c(&img->m);
}

void gs_image_set_direct_io(struct gs_image *img, bool on)
{
	if (img->parent)
		gs_image_set_direct_io(img->parent, on);
	atomic_store(&img->direct_io, on);
}

/* ---------------------------------------------------------------- reads */

/* Reads len bytes of data file fi at off: O_DIRECT for the aligned part where buffer and offset allow. */
static int read_range(struct gs_image *img, uint32_t fi, uint64_t off, void *buf, size_t len, struct gs_err *err)
{
	struct reader_file *rf = &img->files[fi];
	const char *name = img->m.files[fi].name;
	char *p = buf;
	while (len) {
		bool direct = rf->direct_fd >= 0 && atomic_load(&rf->direct_ok) && atomic_load(&img->direct_io) &&
			      (uintptr_t)p % GS_FMT_ALIGN == 0 && off % GS_FMT_ALIGN == 0 && len >= GS_FMT_ALIGN;
		size_t n = direct ? len / GS_FMT_ALIGN * GS_FMT_ALIGN : len;
		if (n > MAX_IO)
			n = MAX_IO;
		ssize_t r;
		if (gs_fault(GS_FI_IMAGE_READ)) {
			errno = gs_fault_errno(GS_FI_IMAGE_READ, EIO);
			r = -1;
		} else {
			r = pread(direct ? rf->direct_fd : rf->fd, p, n, (off_t)off);
		}
		if (r < 0) {
			if (errno == EINTR)
				continue;
			if (direct && errno == EINVAL) {
				atomic_store(&rf->direct_ok, false);
				continue;
			}
			/* EIO: the medium cannot give the image back; the image is what is bad */
			return gs_fail_errno(err, errno == EIO ? GS_E_IMAGE : GS_E_FAILURE, errno,
					     "image '%s': reading '%s' at %" PRIu64 " failed", img->path, name, off);
		}
		if (r == 0)
			return gs_fail(err, GS_E_IMAGE, "image '%s': data file '%s' ends at %" PRIu64 ", before its chunks do"
				       " (truncated after the image was opened?)", img->path, name, off);
		p += r;
		len -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

static int crc_mismatch(const struct gs_image *img, size_t i, uint32_t crc, struct gs_err *err)
{
	const struct gs_image_chunk *c = &img->m.chunks[i];
	return gs_fail(err, GS_E_IMAGE, "image '%s': chunk %zu (allocation %" PRIu64 ", offset %" PRIu64 ", %" PRIu64
		       " bytes) in '%s' at %" PRIu64 " is corrupt: checksum 0x%08" PRIx32 ", expected 0x%08" PRIx32,
		       img->path, i, c->alloc_id, c->offset, c->length, img->m.files[c->file_index].name, c->file_offset,
		       crc, c->crc32c);
}

static int stored_crc_mismatch(const struct gs_image *img, size_t i, uint32_t crc, struct gs_err *err)
{
	const struct gs_image_chunk *c = &img->m.chunks[i];
	return gs_fail(err, GS_E_IMAGE, "image '%s': chunk %zu (allocation %" PRIu64 ", offset %" PRIu64 ", %" PRIu64
		       " bytes, %s-compressed into %" PRIu64 ") in '%s' at %" PRIu64 " is corrupt: checksum of the stored bytes"
		       " 0x%08" PRIx32 ", expected 0x%08" PRIx32, img->path, i, c->alloc_id, c->offset, c->length,
		       gs_codec_name(c->codec), c->stored_length, img->m.files[c->file_index].name, c->file_offset, crc,
		       c->stored_crc32c);
}

/*
 * A compressed chunk: its stored bytes are read and checked against their
 * own checksum first (damage is named before any decompressor sees it),
 * then decompressed into buf and the result checked against the chunk's.
 */
static int read_compressed(struct gs_image *img, size_t i, void *buf, struct gs_err *err)
{
	const struct gs_image_chunk *c = &img->m.chunks[i];
	void *st = gs_codec_stored_buffer(c->stored_length);
	if (!st)
		return gs_image_oom(err, "a compressed chunk");
	int rc = read_range(img, c->file_index, c->file_offset, st, c->stored_length, err);
	if (rc)
		return rc;
	uint32_t crc = gs_crc32c(0, st, c->stored_length);
	if (crc != c->stored_crc32c)
		return stored_crc_mismatch(img, i, crc, err);
	const char *why;
	int d = gs_chunk_decompress(c->codec, c->transform, st, c->stored_length, buf, c->length, &why);
	if (d == -2)
		return gs_image_oom(err, "decompressing a chunk");
	if (d == -3)
		return gs_fail(err, GS_E_IMAGE, "image '%s': chunk %zu is %s-compressed, and %s", img->path, i,
			       gs_codec_name(c->codec), why);
	if (d)
		return gs_fail(err, GS_E_IMAGE, "image '%s': chunk %zu (allocation %" PRIu64 ", offset %" PRIu64 ", %" PRIu64
			       " bytes) in '%s' at %" PRIu64 " does not decompress: %s", img->path, i, c->alloc_id,
			       c->offset, c->length, img->m.files[c->file_index].name, c->file_offset, why);
	crc = gs_crc32c(0, buf, c->length);
	return crc == c->crc32c ? 0 : crc_mismatch(img, i, crc, err);
}

int gs_image_read_chunk(struct gs_image *img, size_t i, void *buf, struct gs_err *err)
{
	if (i >= img->m.nchunks)
		return gs_fail(err, GS_E_FAILURE, "image '%s' has no chunk %zu", img->path, i);
	const struct gs_image_chunk *c = &img->m.chunks[i];
	if (c->flags & GS_CHUNK_F_ZERO) {
		memset(buf, 0, c->length);
		return 0;
	}
	if (c->flags & GS_CHUNK_F_ELSEWHERE)
		return gs_fail(err, GS_E_IMAGE, "image '%s': chunk %zu (allocation %" PRIu64 ", offset %" PRIu64
			       ") is not in this image", img->path, i, c->alloc_id, c->offset);
	if (c->flags & GS_CHUNK_F_COMPRESSED)
		return read_compressed(img, i, buf, err);
	if (c->flags & GS_CHUNK_F_PARENT) /* checked at open to be that chunk: same length, checksum, fingerprint */
		return gs_image_read_chunk(img->parent, c->file_offset, buf, err);
	if (c->flags & GS_CHUNK_F_STORED) {
		struct gs_store_object want = chunk_object(c);
		int rc = gs_store_read_object(img->store, &want, buf, err);
		if (rc)
			gs_err_wrap(err, "image '%s': chunk %zu (allocation %" PRIu64 ", offset %" PRIu64 ")", img->path, i,
				    c->alloc_id, c->offset);
		return rc;
	}
	/*
	 * Piece by piece: each piece is checksummed right after it lands, while
	 * it is still in the CPU's cache, instead of a second pass over the whole
	 * chunk from memory. The data is read once, into buf (no bounce). With
	 * O_DIRECT the data comes by DMA, not through the cache: one large read
	 * keeps the device's queue full instead.
	 */
	uint64_t piece = atomic_load(&img->direct_io) ? c->length : READ_PIECE;
	uint32_t crc = 0;
	for (uint64_t done = 0; done < c->length;) {
		size_t n = (size_t)(c->length - done < piece ? c->length - done : piece);
		int rc = read_range(img, c->file_index, c->file_offset + done, (char *)buf + done, n, err);
		if (rc)
			return rc;
		crc = gs_crc32c(crc, (char *)buf + done, n);
		done += n;
	}
	return crc == c->crc32c ? 0 : crc_mismatch(img, i, crc, err);
}

/* ---------------------------------------------------------------- verify */

/* A chunk whose bytes passed their CRC but whose fingerprint is not the recorded one (a writer's or a GPU's fault). */
static int check_fp(const struct gs_image *img, size_t i, struct gs_fp_sums sums, struct gs_err *err)
{
	const struct gs_image_chunk *c = &img->m.chunks[i];
	struct gs_fp f = gs_fp_final(sums, c->length);
	if (f.lo == c->fp_lo && f.hi == c->fp_hi)
		return 0;
	return gs_fail(err, GS_E_IMAGE, "image '%s': chunk %zu (allocation %" PRIu64 ", offset %" PRIu64 ", %" PRIu64
		       " bytes) has fingerprint %016" PRIx64 "%016" PRIx64 ", its record says %016" PRIx64 "%016" PRIx64,
		       img->path, i, c->alloc_id, c->offset, c->length, f.hi, f.lo, c->fp_hi, c->fp_lo);
}

/* Item i of the checksum pass: stored chunk i, or (from nchunks on) piece i - nchunks of CRIU's files. */
static int verify_item(void *ctx, size_t i, void *buf, struct gs_err *err)
{
	struct gs_image *img = ctx;
	if (i >= img->m.nchunks) {
		const struct gs_cpu_piece *p = &img->cpu_list.pieces[i - img->m.nchunks];
		uint32_t crc;
		int rc = gs_cpu_piece_crc(img->cpu_fd, img->path, p, buf, VERIFY_PIECE, &crc, err);
		if (!rc && crc != p->crc32c)
			rc = gs_fail(err, GS_E_IMAGE, "image '%s': '%s/%s' is corrupt in bytes %" PRIu64 "-%" PRIu64
				     ": checksum 0x%08" PRIx32 ", expected 0x%08" PRIx32, img->path, GS_FMT_CPU_DIR_NAME,
				     p->name, p->offset, p->offset + p->length, crc, p->crc32c);
		return rc;
	}
	const struct gs_image_chunk *c = &img->m.chunks[i];
	if (c->flags & (GS_CHUNK_F_ZERO | GS_CHUNK_F_ELSEWHERE))
		return 0;
	bool fp = img->verify_fp && (c->fp_lo || c->fp_hi);
	struct gs_fp_sums sums = { 0, 0 };
	if (c->flags & (GS_CHUNK_F_PARENT | GS_CHUNK_F_STORED)) {
		/* the parent's bytes through the chain, or the store's object, checked as gs_image_read_chunk checks them */
		void *out = NULL;
		if (posix_memalign(&out, GS_FMT_ALIGN, gs_round_up(c->length, GS_FMT_ALIGN)))
			return gs_image_oom(err, "verifying a parent chunk");
		int rc = gs_image_read_chunk(img, i, out, err);
		if (!rc && fp)
			gs_fp_add(&sums, out, c->length, 0);
		free(out);
		return rc ? rc : fp ? check_fp(img, i, sums, err) : 0;
	}
	if (c->flags & GS_CHUNK_F_COMPRESSED) {
		/* both checksums: the stored bytes', then the decompressed chunk's */
		void *out = NULL;
		if (posix_memalign(&out, GS_FMT_ALIGN, gs_round_up(c->length, GS_FMT_ALIGN)))
			return gs_image_oom(err, "verifying a compressed chunk");
		int rc = read_compressed(img, i, out, err);
		if (!rc && fp)
			gs_fp_add(&sums, out, c->length, 0);
		free(out);
		return rc ? rc : fp ? check_fp(img, i, sums, err) : 0;
	}
	uint32_t crc = 0;
	for (uint64_t done = 0; done < c->length; done += VERIFY_PIECE) {
		size_t n = (size_t)(c->length - done < VERIFY_PIECE ? c->length - done : VERIFY_PIECE);
		int rc = read_range(img, c->file_index, c->file_offset + done, buf, n, err);
		if (rc)
			return rc;
		crc = gs_crc32c(crc, buf, n);
		if (fp) /* pieces are multiples of 16 bytes: word done / 16 comes first */
			gs_fp_add(&sums, buf, n, done / 16);
	}
	if (crc != c->crc32c)
		return crc_mismatch(img, i, crc, err);
	return fp ? check_fp(img, i, sums, err) : 0;
}

/* Item i of a pass over CRIU's files only: piece i of them. */
static int verify_cpu_item(void *ctx, size_t i, void *buf, struct gs_err *err)
{
	struct gs_image *img = ctx;
	return verify_item(img, img->m.nchunks + i, buf, err);
}

int gs_image_verify_part(struct gs_image *img, unsigned nthreads, enum gs_image_part part, struct gs_err *err)
{
	if (part != GS_IMAGE_PART_GPU && img->m.info.cpu_state && !img->cpu_listed)
		pr_warn("image '%s' has no list of CRIU's files (written by an older gpusnap, or never published): its "
			"GPU data is verified, '%s/' is not", img->path, GS_FMT_CPU_DIR_NAME);
	size_t ncpu = img->cpu_listed ? img->cpu_list.npieces : 0;
	if (part == GS_IMAGE_PART_CPU)
		return gs_fs_parallel(ncpu, nthreads, VERIFY_PIECE, verify_cpu_item, img, err);
	size_t n = img->m.nchunks + (part == GS_IMAGE_PART_ALL ? ncpu : 0);
	return gs_fs_parallel(n, nthreads, VERIFY_PIECE, verify_item, img, err);
}

int gs_image_verify(struct gs_image *img, unsigned nthreads, struct gs_err *err)
{
	return gs_image_verify_part(img, nthreads, GS_IMAGE_PART_ALL, err);
}
