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
 */
#define LOG_PREFIX "image: "
#include "image/image.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fault.h"
#include "common/log.h"
#include "common/util.h"
#include "image/cpu_list.h"
#include "image/crc32c.h"
#include "image/image_fs.h"
#include "image/manifest.h"

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
	if ((rc = gs_fmt_data_header_check(header, sizeof(header), img->m.info.image_id, f->index, f->name, err)))
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

static int image_open(const char *dir, bool hold, bool partial, struct gs_image **imgp, struct gs_err *err);

int gs_image_open(const char *dir, struct gs_image **imgp, struct gs_err *err)
{
	return image_open(dir, false, false, imgp, err);
}

int gs_image_open_partial(const char *dir, struct gs_image **imgp, struct gs_err *err)
{
	return image_open(dir, false, true, imgp, err);
}

int gs_image_open_held(const char *dir, struct gs_image **imgp, struct gs_err *err)
{
	/* each round a publish replaced the image between the open and the lock: the new one is opened */
	for (int round = 0;; round++) {
		int rc = image_open(dir, true, false, imgp, err);
		if (rc != -1)
			return rc;
		if (round >= HOLD_ROUNDS)
			return gs_fail(err, GS_E_STATE, "image '%s' was replaced %d times while being opened; try again",
				       dir, HOLD_ROUNDS + 1);
	}
}

/* -1 (hold only): the directory was replaced before it was locked, nothing is open. */
static int image_open(const char *dir, bool hold, bool partial, struct gs_image **imgp, struct gs_err *err)
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
	if (elsewhere && !partial) {
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

void gs_image_set_direct_io(struct gs_image *img, bool on)
{
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
	uint32_t crc = 0;
	for (uint64_t done = 0; done < c->length; done += VERIFY_PIECE) {
		size_t n = (size_t)(c->length - done < VERIFY_PIECE ? c->length - done : VERIFY_PIECE);
		int rc = read_range(img, c->file_index, c->file_offset + done, buf, n, err);
		if (rc)
			return rc;
		crc = gs_crc32c(crc, buf, n);
	}
	return crc == c->crc32c ? 0 : crc_mismatch(img, i, crc, err);
}

int gs_image_verify(struct gs_image *img, unsigned nthreads, struct gs_err *err)
{
	if (img->m.info.cpu_state && !img->cpu_listed)
		pr_warn("image '%s' has no list of CRIU's files (written by an older gpusnap, or never published): its "
			"GPU data is verified, '%s/' is not", img->path, GS_FMT_CPU_DIR_NAME);
	size_t n = img->m.nchunks + (img->cpu_listed ? img->cpu_list.npieces : 0);
	return gs_fs_parallel(n, nthreads, VERIFY_PIECE, verify_item, img, err);
}
