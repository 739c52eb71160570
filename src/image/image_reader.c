/*
 * image_reader.c - opening, validating, reading and verifying an image (see
 * image.h).
 *
 * Everything is opened relative to the image directory's descriptor with
 * O_NOFOLLOW, after the directory itself passed the trust rule, so nothing
 * in the image can make the reader look outside it. All data files stay open
 * for the image's life: an image replaced by a new dump meanwhile is still
 * read whole, from the old files.
 */
#define LOG_PREFIX "image: "
#include "image/image.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "image/crc32c.h"
#include "image/image_fs.h"
#include "image/manifest.h"

#define VERIFY_PIECE (8 * GS_MiB) /* read size of gs_image_verify; chunks are checked piece by piece */
#define VERIFY_MAX_THREADS 16
#define MAX_IO (1ULL << 30)
/* gs_image_read_chunk reads and checksums in pieces of this (a multiple of GS_FMT_ALIGN, fits in L2) */
#define READ_PIECE (1ULL << 20)

struct reader_file {
	int fd;        /* buffered reads */
	int direct_fd; /* O_DIRECT reads, or -1 */
	atomic_bool direct_ok;
};

struct gs_image {
	char *path;
	int dir_fd;
	struct gs_manifest m;
	struct reader_file *files;
	atomic_bool direct_io;
};

static int open_fail(const char *path, const char *name, int e, struct gs_err *err)
{
	if (e == ELOOP)
		return gs_fail(err, GS_E_PERMISSION, "refusing '%s/%s': a symbolic link", path, name);
	if (e == EACCES || e == EPERM)
		return gs_fail_errno(err, GS_E_PERMISSION, e, "cannot open '%s/%s'", path, name);
	return gs_fail_errno(err, GS_E_FAILURE, e, "cannot open '%s/%s'", path, name);
}

static int read_manifest(struct gs_image *img, struct gs_err *err)
{
	int fd = openat(img->dir_fd, GS_FMT_MANIFEST_NAME, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return gs_fail(err, GS_E_IMAGE, "'%s' is not a gpusnap image (no " GS_FMT_MANIFEST_NAME ")", img->path);
		return open_fail(img->path, GS_FMT_MANIFEST_NAME, errno, err);
	}
	char path[4200];
	snprintf(path, sizeof(path), "%s/%s", img->path, GS_FMT_MANIFEST_NAME);
	struct stat st;
	int rc = 0;
	void *buf = NULL;
	if (fstat(fd, &st) < 0) {
		rc = gs_fail_errno(err, GS_E_FAILURE, errno, "cannot stat '%s'", path);
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = gs_fail(err, GS_E_IMAGE, "'%s' is not a regular file", path);
		goto out;
	}
	if ((rc = gs_fs_check_trusted(&st, path, err)))
		goto out;
	if ((uint64_t)st.st_size > GS_FMT_MANIFEST_MAX) {
		rc = gs_fail(err, GS_E_IMAGE, "'%s' is %lld bytes, more than the %llu MiB a manifest may be", path,
			     (long long)st.st_size, GS_FMT_MANIFEST_MAX / GS_MiB);
		goto out;
	}
	size_t len = (size_t)st.st_size;
	buf = malloc(len ? len : 1);
	if (!buf) {
		rc = gs_fail(err, GS_E_NO_SPACE, "out of memory for a %zu-byte manifest", len);
		goto out;
	}
	int e = gs_fs_pread_full(fd, buf, len, 0);
	if (e) {
		rc = e == -EIO ? gs_fail(err, GS_E_IMAGE, "'%s' shrank while being read", path)
			       : gs_fail_errno(err, GS_E_FAILURE, -e, "cannot read '%s'", path);
		goto out;
	}
	rc = gs_manifest_decode(buf, len, &img->m, err); /* owns buf from here */
	buf = NULL;
	if (rc)
		gs_err_wrap(err, "image '%s'", img->path);
out:
	free(buf);
	close(fd);
	return rc;
}

static int open_data_file(struct gs_image *img, size_t i, struct gs_err *err)
{
	const struct gs_image_data_file *f = &img->m.files[i];
	struct reader_file *rf = &img->files[i];
	rf->fd = openat(img->dir_fd, f->name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (rf->fd < 0) {
		if (errno == ENOENT)
			return gs_fail(err, GS_E_IMAGE, "image '%s': data file '%s' is missing", img->path, f->name);
		return open_fail(img->path, f->name, errno, err);
	}
	char path[4200];
	snprintf(path, sizeof(path), "%s/%s", img->path, f->name);
	struct stat st;
	if (fstat(rf->fd, &st) < 0)
		return gs_fail_errno(err, GS_E_FAILURE, errno, "cannot stat '%s'", path);
	if (!S_ISREG(st.st_mode))
		return gs_fail(err, GS_E_IMAGE, "image '%s': data file '%s' is not a regular file", img->path, f->name);
	int rc = gs_fs_check_trusted(&st, path, err);
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

	rf->direct_fd = openat(img->dir_fd, f->name, O_RDONLY | O_NOFOLLOW | O_DIRECT | O_CLOEXEC);
	struct stat dst;
	if (rf->direct_fd >= 0 && (fstat(rf->direct_fd, &dst) < 0 || dst.st_ino != st.st_ino || dst.st_dev != st.st_dev)) {
		close(rf->direct_fd); /* replaced between the two opens: read everything through the checked one */
		rf->direct_fd = -1;
	}
	atomic_init(&rf->direct_ok, rf->direct_fd >= 0);
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
	/* CRIU restores whatever these files say: they must be as trusted as ours. */
	return gs_fs_check_tree_trusted(img->dir_fd, GS_FMT_CPU_DIR_NAME, path, err);
}

int gs_image_open(const char *dir, struct gs_image **imgp, struct gs_err *err)
{
	*imgp = NULL;
	struct gs_image *img = calloc(1, sizeof(*img));
	if (!img || !(img->path = strdup(dir))) {
		free(img);
		return gs_fail(err, GS_E_NO_SPACE, "out of memory opening an image");
	}
	atomic_init(&img->direct_io, true);
	img->dir_fd = -1;
	int rc = 0;
	img->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (img->dir_fd < 0) {
		int e = errno;
		if (e == ENOENT)
			rc = gs_fail(err, GS_E_IMAGE, "no image at '%s': no such directory", dir);
		else if (e == ENOTDIR)
			rc = gs_fail(err, GS_E_IMAGE, "'%s' is not a gpusnap image (not a directory)", dir);
		else
			rc = gs_fail_errno(err, e == EACCES || e == EPERM ? GS_E_PERMISSION : GS_E_FAILURE, e,
					   "cannot open '%s'", dir);
		goto fail;
	}
	struct stat st;
	if (fstat(img->dir_fd, &st) < 0) {
		rc = gs_fail_errno(err, GS_E_FAILURE, errno, "cannot stat '%s'", dir);
		goto fail;
	}
	if ((rc = gs_fs_check_trusted(&st, dir, err)) || (rc = read_manifest(img, err)))
		goto fail;
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
		ssize_t r = pread(direct ? rf->direct_fd : rf->fd, p, n, (off_t)off);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			if (direct && errno == EINVAL) {
				atomic_store(&rf->direct_ok, false);
				continue;
			}
			return gs_fail_errno(err, GS_E_FAILURE, errno, "image '%s': reading '%s' at %" PRIu64 " failed",
					     img->path, name, off);
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

struct verify_job {
	struct gs_image *img;
	atomic_size_t next;
	atomic_bool stop;
	pthread_mutex_t lock;
	size_t bad_index; /* lowest failing chunk so far, SIZE_MAX if none */
	struct gs_err bad;
	int bad_code;
};

static void verify_fail(struct verify_job *job, size_t i, const struct gs_err *e)
{
	pthread_mutex_lock(&job->lock);
	if (i < job->bad_index) {
		job->bad_index = i;
		job->bad = *e;
		job->bad_code = e->code;
	}
	pthread_mutex_unlock(&job->lock);
	atomic_store(&job->stop, true);
}

static void *verify_worker(void *arg)
{
	struct verify_job *job = arg;
	struct gs_image *img = job->img;
	void *buf = NULL;
	struct gs_err e = { 0 };
	if (posix_memalign(&buf, GS_FMT_ALIGN, VERIFY_PIECE)) {
		gs_fail(&e, GS_E_NO_SPACE, "out of memory verifying '%s'", img->path);
		verify_fail(job, 0, &e);
		return NULL;
	}
	/*
	 * Indexes are handed out in order, so when chunk k fails every chunk
	 * below k was already taken by some thread and is finished before the
	 * result is read: the lowest bad chunk is the one reported.
	 */
	while (!atomic_load(&job->stop)) {
		size_t i = atomic_fetch_add(&job->next, 1);
		if (i >= img->m.nchunks)
			break;
		const struct gs_image_chunk *c = &img->m.chunks[i];
		if (c->flags & GS_CHUNK_F_ZERO)
			continue;
		uint32_t crc = 0;
		int rc = 0;
		for (uint64_t done = 0; done < c->length && !rc; done += VERIFY_PIECE) {
			size_t n = (size_t)(c->length - done < VERIFY_PIECE ? c->length - done : VERIFY_PIECE);
			rc = read_range(img, c->file_index, c->file_offset + done, buf, n, &e);
			if (!rc)
				crc = gs_crc32c(crc, buf, n);
		}
		if (!rc && crc != c->crc32c)
			rc = crc_mismatch(img, i, crc, &e);
		if (rc)
			verify_fail(job, i, &e);
	}
	free(buf);
	return NULL;
}

int gs_image_verify(struct gs_image *img, unsigned nthreads, struct gs_err *err)
{
	if (nthreads == 0) {
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);
		nthreads = cpus > 0 ? (unsigned)cpus : 1;
	}
	if (nthreads > VERIFY_MAX_THREADS)
		nthreads = VERIFY_MAX_THREADS;
	if (nthreads > img->m.nchunks)
		nthreads = img->m.nchunks ? (unsigned)img->m.nchunks : 1;

	struct verify_job job = { .img = img, .bad_index = SIZE_MAX };
	atomic_init(&job.next, 0);
	atomic_init(&job.stop, false);
	pthread_mutex_init(&job.lock, NULL);
	pthread_t threads[VERIFY_MAX_THREADS];
	unsigned started = 0;
	for (unsigned t = 1; t < nthreads; t++) {
		if (pthread_create(&threads[started], NULL, verify_worker, &job) != 0)
			break; /* fewer threads is slower, not wrong */
		started++;
	}
	verify_worker(&job); /* this thread works too */
	for (unsigned t = 0; t < started; t++)
		pthread_join(threads[t], NULL);
	pthread_mutex_destroy(&job.lock);
	if (job.bad_index != SIZE_MAX) {
		if (err)
			*err = job.bad;
		return job.bad_code;
	}
	return 0;
}
