/*
 * image_writer.c - writing an image: chunks from several threads into data
 * files, then the manifest (seal); the temporary directory it is written in
 * and the publishing of it at DIR are image_tmp.c's (see image.h).
 *
 * Concurrency: one mutex guards the writer's tables and the offset
 * reservation in data files; checksums, zero detection, compression
 * (codec.h) and the payload pwrite happen outside it, so writer threads
 * only meet for a few instructions per chunk and compress in parallel. Data
 * files live behind stable pointers so a thread keeps using its file while
 * another one appends the next.
 *
 * Crash safety: the files are written in a temporary directory that holds
 * no manifest until every payload is on disk (image_tmp.c).
 */
#define LOG_PREFIX "image: "
#include "image/image.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include <linux/magic.h>

#include "common/fault.h"
#include "common/log.h"
#include "common/proc.h"
#include "common/printable.h"
#include "common/util.h"
#include "core/fingerprint.h"
#include "image/codec.h"
#include "image/cpu_list.h"
#include "image/crc32c.h"
#include "image/image_fs.h"
#include "image/image_tmp.h"
#include "image/manifest.h"
#include "image/store.h"

#ifndef GPUSNAP_VERSION
#define GPUSNAP_VERSION "unknown"
#endif

/* Largest single pwrite (Linux caps one call at 2 GiB - 4 KiB anyway). */
#define MAX_IO (1ULL << 30)

struct data_file {
	int fd;           /* buffered writes, fsync */
	int direct_fd;    /* O_DIRECT writes, or -1 where the file system refuses them */
	atomic_bool direct_ok;
	uint64_t next;    /* first free aligned offset; reserved under the writer's lock */
	char name[GS_FMT_DATA_NAME_MAX];
};

struct gs_image_writer {
	pthread_mutex_t lock;
	char *dir;      /* for messages: opts->target, else the directory given to gs_image_writer_open_in */
	char *tmp_path; /* where the files are written */
	int tmp_fd;

	struct gs_image_info info; /* strings owned */
	uint64_t max_file_size;
	bool no_direct_io, no_data_sync, store_zero_chunks;
	bool memory_fs; /* the image's file system keeps files in memory (tmpfs): O_DIRECT, if taken, is buffered there */
	struct gs_compress compress; /* codec NONE: chunks are stored as they are */
	bool has_parent;             /* an incremental image: parent (path owned) */
	bool partial;                /* a partial image: ELSEWHERE chunks allowed (gs_image_writer_set_partial) */
	struct gs_image_parent parent;
	struct gs_store *store;      /* chunks go into this chunk store (not owned); store_rec owned */
	struct gs_image_store store_rec;

	struct data_file **files;
	size_t nfiles, cap_files;
	/* The files taking payloads now (indices into files): several where writes are buffered (parallel_data_files). */
	size_t *open_files;
	unsigned nopen, max_open, next_open;
	struct gs_image_gpu *gpus; /* names owned */
	size_t ngpus, cap_gpus;
	struct gs_image_allocation *allocs; /* blobs owned */
	size_t nallocs, cap_allocs;
	uint32_t *alloc_slots; /* open-addressing id -> index + 1; 0 is empty */
	size_t slot_mask;
	struct gs_image_chunk *chunks;
	size_t nchunks, cap_chunks;
	struct gs_image_kv *meta; /* strings owned */
	size_t nmeta, cap_meta;

	int failed; /* sticky: a write failed, the image can only be aborted */
	struct gs_err failure;

	atomic_uint_fast64_t payload_bytes, direct_bytes, data_bytes, compressed_chunks;
	uint64_t zero_chunks, zero_bytes;
	uint64_t parent_chunks, parent_bytes;
	uint64_t store_chunks, store_bytes;
	atomic_uint_fast64_t store_new_objects;
};

/* -------------------------------------------------------------- helpers */

int gs_image_errno_code(int e)
{
	switch (e) {
	case ENOSPC:
	case EDQUOT:
	case ENOMEM: return GS_E_NO_SPACE;
	case EACCES:
	case EPERM:
	case EROFS: return GS_E_PERMISSION;
	default: return GS_E_FAILURE;
	}
}

/* An I/O error on file `name` of the image; ENOSPC names the file system by the image's path. */
static int io_fail(struct gs_image_writer *w, const char *what, const char *name, int e, struct gs_err *err)
{
	if (e == ENOSPC || e == EDQUOT)
		return gs_fail(err, GS_E_NO_SPACE, "no space left on the file system holding '%s' (%s '%s'): %s", w->dir,
			       what, name, strerror(e));
	return gs_fail_errno(err, gs_image_errno_code(e), e, "%s '%s/%s' failed", what, w->tmp_path, name);
}

int gs_image_oom(struct gs_err *err, const char *what)
{
	return gs_fail(err, GS_E_NO_SPACE, "out of memory (%s)", what);
}

/* Grows *arr (of *cap elements of size sz) to hold n + 1. */
static int grow(void **arr, size_t *cap, size_t n, size_t sz)
{
	return gs_grow_array(arr, cap, n, sz, 16);
}

/* A write of the image's files: 0 or -errno, through the fault point GS_FI_IMAGE_WRITE. */
int gs_image_write_all(int fd, const void *buf, size_t len, uint64_t off)
{
	if (gs_fault(GS_FI_IMAGE_WRITE))
		return -gs_fault_errno(GS_FI_IMAGE_WRITE, EIO);
	return gs_fs_pwrite_full(fd, buf, len, off);
}

/* Records the first failure; later calls get it back. */
static int set_failed(struct gs_image_writer *w, const struct gs_err *err, int code)
{
	pthread_mutex_lock(&w->lock);
	if (!w->failed) {
		w->failed = code;
		if (err)
			w->failure = *err;
		else
			gs_fail(&w->failure, code, "writing the image failed");
	}
	pthread_mutex_unlock(&w->lock);
	return code;
}

static int get_failed_locked(struct gs_image_writer *w, struct gs_err *err)
{
	if (err)
		*err = w->failure;
	return w->failed;
}

static int get_failed(struct gs_image_writer *w, struct gs_err *err)
{
	pthread_mutex_lock(&w->lock);
	int rc = w->failed ? get_failed_locked(w, err) : 0;
	pthread_mutex_unlock(&w->lock);
	return rc;
}

static uint64_t hash_id(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	return x ^ (x >> 33);
}

static ptrdiff_t find_alloc_locked(const struct gs_image_writer *w, uint64_t id)
{
	if (!w->alloc_slots)
		return -1;
	for (size_t s = hash_id(id) & w->slot_mask;; s = (s + 1) & w->slot_mask) {
		uint32_t v = w->alloc_slots[s];
		if (!v)
			return -1;
		if (w->allocs[v - 1].id == id)
			return (ptrdiff_t)(v - 1);
	}
}

static int rehash_locked(struct gs_image_writer *w, size_t want)
{
	size_t cap = 64;
	while (cap < want * 2)
		cap *= 2;
	uint32_t *slots = calloc(cap, sizeof(*slots));
	if (!slots)
		return -1;
	for (size_t i = 0; i < w->nallocs; i++) {
		size_t s = hash_id(w->allocs[i].id) & (cap - 1);
		while (slots[s])
			s = (s + 1) & (cap - 1);
		slots[s] = (uint32_t)(i + 1);
	}
	free(w->alloc_slots);
	w->alloc_slots = slots;
	w->slot_mask = cap - 1;
	return 0;
}

void gs_image_random_id(uint8_t id[16])
{
	if (getrandom(id, 16, GRND_NONBLOCK) == 16)
		return;
	/* No entropy yet (early boot): uniqueness is all the id needs. */
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t a = hash_id((uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec);
	uint64_t b = hash_id(((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)id ^ a);
	memcpy(id, &a, 8);
	memcpy(id + 8, &b, 8);
}

static char *dup_or_empty(const char *s)
{
	return strdup(s ? s : "");
}

/* ----------------------------------------------------------------- open */

static void writer_free(struct gs_image_writer *w)
{
	for (size_t i = 0; i < w->nfiles; i++) {
		if (w->files[i]->fd >= 0)
			close(w->files[i]->fd);
		if (w->files[i]->direct_fd >= 0)
			close(w->files[i]->direct_fd);
		free(w->files[i]);
	}
	free(w->files);
	free(w->open_files);
	for (size_t i = 0; i < w->ngpus; i++)
		free((char *)w->gpus[i].name);
	free(w->gpus);
	for (size_t i = 0; i < w->nallocs; i++)
		free((void *)w->allocs[i].blob);
	free(w->allocs);
	free(w->alloc_slots);
	free(w->chunks);
	for (size_t i = 0; i < w->nmeta; i++) {
		free((char *)w->meta[i].key);
		free((char *)w->meta[i].value);
	}
	free(w->meta);
	free((char *)w->info.gpusnap_version);
	free((char *)w->info.hostname);
	free((char *)w->info.source_comm);
	free((char *)w->info.how);
	free((char *)w->parent.path);
	free((char *)w->store_rec.path);
	if (w->tmp_fd >= 0)
		close(w->tmp_fd);
	free(w->dir);
	free(w->tmp_path);
	pthread_mutex_destroy(&w->lock);
	free(w);
}

/* A writer over the directory tmp_path (already created, empty, 0700); dir names it in messages. */
static int writer_new(const char *tmp_path, const char *dir, const struct gs_image_writer_opts *opts,
		      struct gs_image_writer **wp, struct gs_err *err)
{
	static const struct gs_image_writer_opts no_opts;
	if (!opts)
		opts = &no_opts;
	*wp = NULL;
	struct gs_image_writer *w = calloc(1, sizeof(*w));
	if (!w)
		return gs_image_oom(err, "writer");
	pthread_mutex_init(&w->lock, NULL);
	w->tmp_fd = -1;
	int rc = 0;
	w->dir = strdup(dir);
	w->tmp_path = strdup(tmp_path);
	if (!w->dir || !w->tmp_path) {
		rc = gs_image_oom(err, "path");
		goto fail;
	}
	w->tmp_fd = open(w->tmp_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (w->tmp_fd < 0) {
		int e = errno;
		rc = gs_fail_errno(err, e == ENOENT ? GS_E_USAGE : gs_image_errno_code(e), e, "cannot open '%s'", w->tmp_path);
		goto fail;
	}

	char host[256] = "";
	if (gethostname(host, sizeof(host) - 1) < 0)
		host[0] = '\0';
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	if (opts->compress_codec > GS_CODEC_MAX) {
		rc = gs_fail(err, GS_E_USAGE, "unknown compression codec %u", opts->compress_codec);
		goto fail;
	}
	w->compress = (struct gs_compress){ .codec = opts->compress_codec, .level = opts->compress_level };
	/* the lowest version that holds the image: older readers read every image written without compression */
	w->info.format_version = w->compress.codec != GS_CODEC_NONE ? GS_FMT_VERSION_COMPRESS : 1;
	if (opts->parent && (rc = gs_image_writer_set_parent(w, opts->parent, err)))
		goto fail;
	if (opts->store && (rc = gs_image_writer_set_store(w, opts->store, opts->store_rec, err)))
		goto fail;
	gs_image_random_id(w->info.image_id);
	w->info.created_ns = (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec;
	w->info.gpusnap_version = strdup(GPUSNAP_VERSION);
	w->info.hostname = strdup(host);
	w->info.source_pid = opts->source_pid;
	w->info.source_comm = dup_or_empty(opts->source_comm);
	w->info.how = dup_or_empty(opts->how);
	w->info.checksum_algo = GS_CSUM_CRC32C;
	if (!w->info.gpusnap_version || !w->info.hostname || !w->info.source_comm || !w->info.how) {
		rc = gs_image_oom(err, "image info");
		goto fail;
	}
	if (strlen(w->info.source_comm) > GS_FMT_STRING_MAX || strlen(w->info.how) > GS_FMT_STRING_MAX) {
		rc = gs_fail(err, GS_E_USAGE, "command name or 'how' longer than %u bytes", GS_FMT_STRING_MAX);
		goto fail;
	}
	w->max_file_size = opts->max_data_file_size;
	w->no_direct_io = opts->no_direct_io;
	w->no_data_sync = opts->no_data_sync;
	w->store_zero_chunks = opts->store_zero_chunks;
	w->max_open = opts->parallel_data_files > 1 ? opts->parallel_data_files : 1;
	if (w->max_open > GS_FMT_DATA_FILES_MAX / 4)
		w->max_open = GS_FMT_DATA_FILES_MAX / 4; /* leaves room for rotation by max_data_file_size */
	w->open_files = calloc(w->max_open, sizeof(*w->open_files));
	if (!w->open_files) {
		rc = gs_image_oom(err, "data files");
		goto fail;
	}
	struct statfs sfs;
	w->memory_fs = fstatfs(w->tmp_fd, &sfs) == 0 && (sfs.f_type == TMPFS_MAGIC || sfs.f_type == RAMFS_MAGIC);
	*wp = w;
	return 0;
fail:
	writer_free(w);
	return rc;
}

int gs_image_writer_open_in(const char *tmp_path, const struct gs_image_writer_opts *opts,
			    struct gs_image_writer **wp, struct gs_err *err)
{
	*wp = NULL;
	if (!tmp_path || !*tmp_path)
		return gs_fail(err, GS_E_USAGE, "no image directory given");
	int rc = writer_new(tmp_path, opts && opts->target ? opts->target : tmp_path, opts, wp, err);
	if (rc)
		return rc;
	struct gs_image_writer *w = *wp;
	struct stat st;
	if (fstat(w->tmp_fd, &st) < 0 || st.st_uid != geteuid() || (st.st_mode & 077)) {
		rc = gs_fail(err, GS_E_PERMISSION, "'%s' must be a directory of this user with mode 0700", tmp_path);
	} else if (faccessat(w->tmp_fd, GS_FMT_MANIFEST_NAME, F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
		rc = gs_fail(err, GS_E_USAGE, "'%s' already holds an image", tmp_path);
	} else if (faccessat(w->tmp_fd, GS_FMT_CPU_DIR_NAME, F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
		/* the owner made room for CRIU's images: the manifest says the image holds CPU state */
		w->info.cpu_state = true;
	}
	if (rc) {
		writer_free(w);
		*wp = NULL;
		return rc;
	}
	pr_debug("writing image in '%s'", tmp_path);
	return 0;
}

const char *gs_image_writer_tmp_path(const struct gs_image_writer *w)
{
	return w->tmp_path;
}

/* ------------------------------------------------------ describing calls */

int gs_image_writer_add_gpu(struct gs_image_writer *w, const struct gs_image_gpu *gpu, struct gs_err *err)
{
	if (gpu->name && strlen(gpu->name) > GS_FMT_STRING_MAX)
		return gs_fail(err, GS_E_FAILURE, "gpu %" PRIu32 ": name longer than %u bytes", gpu->index, GS_FMT_STRING_MAX);
	char *name = dup_or_empty(gpu->name);
	if (!name)
		return gs_image_oom(err, "gpu");
	int rc = 0;
	pthread_mutex_lock(&w->lock);
	for (size_t i = 0; i < w->ngpus; i++)
		if (w->gpus[i].index == gpu->index) {
			rc = gs_fail(err, GS_E_FAILURE, "gpu %" PRIu32 " added twice", gpu->index);
			goto out;
		}
	if (grow((void **)&w->gpus, &w->cap_gpus, w->ngpus, sizeof(*w->gpus))) {
		rc = gs_image_oom(err, "gpu");
		goto out;
	}
	w->gpus[w->ngpus] = *gpu;
	w->gpus[w->ngpus++].name = name;
	name = NULL;
out:
	pthread_mutex_unlock(&w->lock);
	free(name);
	return rc;
}

int gs_image_writer_add_allocation(struct gs_image_writer *w, const struct gs_image_allocation *a, struct gs_err *err)
{
	if (a->blob_len > GS_FMT_BLOB_MAX || (a->blob_len && !a->blob))
		return gs_fail(err, GS_E_FAILURE, "allocation %" PRIu64 ": blob of %zu bytes (limit %u)", a->id, a->blob_len,
			       GS_FMT_BLOB_MAX);
	if (a->flags & ~GS_ALLOC_F_KNOWN)
		return gs_fail(err, GS_E_FAILURE, "allocation %" PRIu64 ": unknown flags 0x%" PRIx32, a->id, a->flags);
	if (a->size > UINT64_MAX - a->va)
		return gs_fail(err, GS_E_FAILURE, "allocation %" PRIu64 ": wraps around the address space", a->id);
	void *blob = NULL;
	if (a->blob_len) {
		blob = malloc(a->blob_len);
		if (!blob)
			return gs_image_oom(err, "allocation blob");
		memcpy(blob, a->blob, a->blob_len);
	}
	int rc = 0;
	pthread_mutex_lock(&w->lock);
	if (find_alloc_locked(w, a->id) >= 0) {
		rc = gs_fail(err, GS_E_FAILURE, "allocation %" PRIu64 " added twice", a->id);
		goto out;
	}
	if (w->nallocs >= UINT32_MAX - 1) {
		rc = gs_fail(err, GS_E_FAILURE, "more than %u allocations", UINT32_MAX - 1);
		goto out;
	}
	if (grow((void **)&w->allocs, &w->cap_allocs, w->nallocs, sizeof(*w->allocs)) ||
	    ((w->nallocs + 1) * 2 > w->slot_mask + 1 && rehash_locked(w, w->nallocs + 1))) {
		rc = gs_image_oom(err, "allocations");
		goto out;
	}
	w->allocs[w->nallocs] = *a;
	w->allocs[w->nallocs].blob = blob;
	blob = NULL;
	size_t s = hash_id(a->id) & w->slot_mask;
	while (w->alloc_slots[s])
		s = (s + 1) & w->slot_mask;
	w->alloc_slots[s] = (uint32_t)(++w->nallocs);
out:
	pthread_mutex_unlock(&w->lock);
	free(blob);
	return rc;
}

int gs_image_writer_set_metadata(struct gs_image_writer *w, const char *key, const char *value, struct gs_err *err)
{
	if (!key || !*key || strlen(key) > GS_FMT_STRING_MAX)
		return gs_fail(err, GS_E_FAILURE, "metadata key must be 1 to %u bytes", GS_FMT_STRING_MAX);
	if (!value)
		value = "";
	if (strlen(value) > GS_FMT_META_VALUE_MAX)
		return gs_fail(err, GS_E_FAILURE, "metadata value of '%s' is longer than %u bytes", key,
			       GS_FMT_META_VALUE_MAX);
	char *v = strdup(value), *k = NULL;
	if (!v)
		return gs_image_oom(err, "metadata");
	int rc = 0;
	pthread_mutex_lock(&w->lock);
	for (size_t i = 0; i < w->nmeta; i++)
		if (!strcmp(w->meta[i].key, key)) {
			free((char *)w->meta[i].value);
			w->meta[i].value = v;
			v = NULL;
			goto out;
		}
	if (w->nmeta >= GS_FMT_META_COUNT_MAX) {
		rc = gs_fail(err, GS_E_FAILURE, "more than %u metadata entries", GS_FMT_META_COUNT_MAX);
		goto out;
	}
	k = strdup(key);
	if (!k || grow((void **)&w->meta, &w->cap_meta, w->nmeta, sizeof(*w->meta))) {
		rc = gs_image_oom(err, "metadata");
		goto out;
	}
	w->meta[w->nmeta].key = k;
	w->meta[w->nmeta++].value = v;
	k = v = NULL;
out:
	pthread_mutex_unlock(&w->lock);
	free(k);
	free(v);
	return rc;
}

int gs_image_writer_cpu_dir(struct gs_image_writer *w, char *path, size_t n, struct gs_err *err)
{
	int rc = 0;
	pthread_mutex_lock(&w->lock);
	if (!w->info.cpu_state) {
		if (mkdirat(w->tmp_fd, GS_FMT_CPU_DIR_NAME, 0700) < 0 && errno != EEXIST) {
			rc = io_fail(w, "creating", GS_FMT_CPU_DIR_NAME, errno, err);
			goto out;
		}
		w->info.cpu_state = true;
	}
	if ((size_t)snprintf(path, n, "%s/%s", w->tmp_path, GS_FMT_CPU_DIR_NAME) >= n)
		rc = gs_fail(err, GS_E_FAILURE, "path of '%s/%s' does not fit in %zu bytes", w->tmp_path,
			     GS_FMT_CPU_DIR_NAME, n);
out:
	pthread_mutex_unlock(&w->lock);
	return rc;
}

void gs_image_writer_stats(struct gs_image_writer *w, struct gs_image_writer_stats *st)
{
	pthread_mutex_lock(&w->lock);
	st->chunks = w->nchunks;
	st->zero_chunks = w->zero_chunks;
	st->zero_bytes = w->zero_bytes;
	st->data_files = (uint32_t)w->nfiles;
	st->parent_chunks = w->parent_chunks;
	st->parent_bytes = w->parent_bytes;
	st->store_chunks = w->store_chunks;
	st->store_bytes = w->store_bytes;
	pthread_mutex_unlock(&w->lock);
	st->store_new_objects = atomic_load(&w->store_new_objects);
	st->payload_bytes = atomic_load(&w->payload_bytes);
	st->direct_bytes = atomic_load(&w->direct_bytes);
	st->data_bytes = atomic_load(&w->data_bytes);
	st->compressed_chunks = atomic_load(&w->compressed_chunks);
}

/* --------------------------------------------------------------- chunks */

static int create_data_file_locked(struct gs_image_writer *w, struct data_file **out, struct gs_err *err)
{
	if (w->nfiles >= GS_FMT_DATA_FILES_MAX)
		return gs_fail(err, GS_E_FAILURE, "the image would need more than %u data files; raise the data file size",
			       GS_FMT_DATA_FILES_MAX);
	if (grow((void **)&w->files, &w->cap_files, w->nfiles, sizeof(*w->files)))
		return gs_image_oom(err, "data files");
	struct data_file *f = calloc(1, sizeof(*f));
	void *block = NULL;
	if (!f || posix_memalign(&block, GS_FMT_ALIGN, GS_FMT_ALIGN)) {
		free(f);
		return gs_image_oom(err, "data file");
	}
	gs_fmt_data_file_name((uint32_t)w->nfiles, f->name);
	f->direct_fd = -1;
	f->fd = openat(w->tmp_fd, f->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	int rc = 0;
	if (f->fd < 0) {
		rc = io_fail(w, "creating", f->name, errno, err);
		goto fail;
	}
	gs_fmt_data_header_build(block, w->info.format_version, w->info.image_id, (uint32_t)w->nfiles);
	int e = gs_image_write_all(f->fd, block, GS_FMT_ALIGN, 0);
	if (e) {
		rc = io_fail(w, "writing", f->name, -e, err);
		goto fail;
	}
	if (!w->no_direct_io) {
		f->direct_fd = openat(w->tmp_fd, f->name, O_WRONLY | O_DIRECT | O_CLOEXEC);
		if (f->direct_fd < 0)
			pr_debug("'%s': no O_DIRECT on this file system (%s), writing through the page cache", f->name,
				 strerror(errno));
	}
	atomic_init(&f->direct_ok, f->direct_fd >= 0);
	f->next = GS_FMT_ALIGN;
	w->files[w->nfiles++] = f;
	free(block);
	*out = f;
	return 0;
fail:
	if (f->fd >= 0) {
		close(f->fd);
		unlinkat(w->tmp_fd, f->name, 0);
	}
	free(f);
	free(block);
	return rc;
}

/* Whether payloads go through memory: then one file serializes its writers (see parallel_data_files). */
static bool buffered_locked(const struct gs_image_writer *w)
{
	return w->no_direct_io || w->memory_fs || (w->nfiles && w->files[0]->direct_fd < 0);
}

/*
 * The data file the next payload of len bytes goes to, by index: the open
 * files take payloads in turn, a new one is opened while there are fewer than
 * the writer may use, and a full one (max_data_file_size) is replaced.
 */
static int pick_data_file_locked(struct gs_image_writer *w, uint64_t len, size_t *index, struct gs_err *err)
{
	struct data_file *f;
	unsigned want = buffered_locked(w) ? w->max_open : 1;
	if (w->nopen < want) {
		int rc = create_data_file_locked(w, &f, err);
		if (rc)
			return rc;
		w->open_files[w->nopen++] = *index = w->nfiles - 1;
		return 0;
	}
	unsigned k = w->next_open++ % w->nopen;
	f = w->files[w->open_files[k]];
	if (w->max_file_size && f->next > GS_FMT_ALIGN && f->next + len > w->max_file_size) {
		int rc = create_data_file_locked(w, &f, err);
		if (rc)
			return rc;
		w->open_files[k] = w->nfiles - 1;
	}
	*index = w->open_files[k];
	return 0;
}

/* Writes a payload at its reserved offset: O_DIRECT for the aligned part where possible, buffered for the rest. */
static int write_payload(struct gs_image_writer *w, struct data_file *f, const void *data, size_t len, uint64_t off,
			 struct gs_err *err)
{
	const char *p = data;
	while (len) {
		bool direct = f->direct_fd >= 0 && atomic_load(&f->direct_ok) && (uintptr_t)p % GS_FMT_ALIGN == 0 &&
			      off % GS_FMT_ALIGN == 0 && len >= GS_FMT_ALIGN;
		size_t n = direct ? len / GS_FMT_ALIGN * GS_FMT_ALIGN : len;
		if (n > MAX_IO)
			n = MAX_IO;
		ssize_t r;
		if (gs_fault(GS_FI_IMAGE_WRITE)) {
			errno = gs_fault_errno(GS_FI_IMAGE_WRITE, EIO);
			r = -1;
		} else {
			r = pwrite(direct ? f->direct_fd : f->fd, p, n, (off_t)off);
		}
		if (r < 0) {
			if (errno == EINTR)
				continue;
			if (direct && errno == EINVAL) {
				/* The device wants a larger alignment than 4096: write through the page cache instead. */
				pr_debug("'%s': O_DIRECT write refused, writing through the page cache", f->name);
				atomic_store(&f->direct_ok, false);
				continue;
			}
			return io_fail(w, "writing", f->name, errno, err);
		}
		if (r == 0)
			return io_fail(w, "writing", f->name, EIO, err);
		atomic_fetch_add(&w->payload_bytes, (uint64_t)r);
		if (direct)
			atomic_fetch_add(&w->direct_bytes, (uint64_t)r);
		p += r;
		len -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

static int write_chunk(struct gs_image_writer *w, uint64_t alloc_id, uint64_t offset, const void *data, uint64_t len,
		       bool known_zero, bool have_crc, uint32_t crc, uint64_t fp_lo, uint64_t fp_hi, struct gs_err *err)
{
	if (len == 0)
		return gs_fail(err, GS_E_FAILURE, "allocation %" PRIu64 ": empty chunk at offset %" PRIu64, alloc_id, offset);
	bool zero = known_zero || (!w->store_zero_chunks && gs_all_zero(data, len));
	if (!zero && len > GS_FMT_CHUNK_DATA_MAX)
		return gs_fail(err, GS_E_FAILURE, "allocation %" PRIu64 ": chunk of %" PRIu64 " bytes, more than %llu MiB",
			       alloc_id, len, GS_FMT_CHUNK_DATA_MAX / GS_MiB);
	if (!zero && !have_crc)
		crc = gs_crc32c(0, data, len);
	/* compressed on this thread, before the lock: the writer's threads compress in parallel */
	const void *stored = data;
	size_t stored_len = len;
	uint8_t transform = 0;
	bool compressed = !zero && w->compress.codec != GS_CODEC_NONE &&
			  gs_chunk_compress(&w->compress, data, len, &stored, &stored_len, &transform) == 1;
	uint32_t stored_crc = compressed ? gs_crc32c(0, stored, stored_len) : crc;
	if (!zero && w->store) {
		/* the object, named by content, written unless the store has it; then a record naming it */
		if (!fp_lo && !fp_hi) {
			struct gs_fp f = gs_fp_of(data, len);
			fp_lo = f.lo;
			fp_hi = f.hi;
		}
		struct gs_store_object o = { .length = len, .stored_length = stored_len, .fp_lo = fp_lo, .fp_hi = fp_hi,
					     .crc32c = crc, .stored_crc32c = stored_crc,
					     .codec = compressed ? w->compress.codec : GS_CODEC_NONE,
					     .transform = compressed ? transform : 0 };
		bool created = false;
		int prc = get_failed(w, err);
		if (!prc)
			prc = gs_store_put(w->store, &o, stored, &created, err);
		if (prc)
			return set_failed(w, err, prc);
		if (created) {
			atomic_fetch_add(&w->store_new_objects, 1);
			atomic_fetch_add(&w->payload_bytes, stored_len);
			if (compressed)
				atomic_fetch_add(&w->compressed_chunks, 1);
		}
		return gs_image_write_stored_chunk(w, alloc_id, offset, len, crc, fp_lo, fp_hi, err);
	}

	struct data_file *f = NULL;
	uint64_t file_offset = 0;
	int rc = 0;
	pthread_mutex_lock(&w->lock);
	if (w->failed) {
		rc = get_failed_locked(w, err);
		goto out;
	}
	ptrdiff_t ai = find_alloc_locked(w, alloc_id);
	if (ai < 0) {
		rc = gs_fail(err, GS_E_FAILURE, "chunk for allocation %" PRIu64 ", which was not added", alloc_id);
		goto out;
	}
	const struct gs_image_allocation *a = &w->allocs[ai];
	if (a->flags & GS_ALLOC_F_NO_DATA) {
		rc = gs_fail(err, GS_E_FAILURE, "chunk for allocation %" PRIu64 ", which is marked as holding no data",
			     alloc_id);
		goto out;
	}
	if (offset > a->size || len > a->size - offset) {
		rc = gs_fail(err, GS_E_FAILURE, "allocation %" PRIu64 ": chunk %" PRIu64 "+%" PRIu64 " is outside its %"
			     PRIu64 " bytes", alloc_id, offset, len, a->size);
		goto out;
	}
	if (grow((void **)&w->chunks, &w->cap_chunks, w->nchunks, sizeof(*w->chunks))) {
		rc = gs_image_oom(err, "chunks");
		goto out;
	}
	struct gs_image_chunk *c = &w->chunks[w->nchunks];
	*c = (struct gs_image_chunk){ .alloc_id = alloc_id, .offset = offset, .length = len };
	if (zero) {
		c->flags = GS_CHUNK_F_ZERO;
		w->nchunks++;
		w->zero_chunks++;
		w->zero_bytes += len;
		goto out;
	}
	size_t file_index;
	if ((rc = pick_data_file_locked(w, stored_len, &file_index, err))) {
		pthread_mutex_unlock(&w->lock);
		return set_failed(w, err, rc);
	}
	f = w->files[file_index];
	file_offset = f->next;
	f->next = gs_round_up(file_offset + stored_len, GS_FMT_ALIGN);
	c->file_index = (uint32_t)file_index;
	c->file_offset = file_offset;
	c->crc32c = crc;
	c->stored_length = stored_len;
	c->stored_crc32c = stored_crc;
	c->fp_lo = fp_lo;
	c->fp_hi = fp_hi;
	if (compressed) {
		c->flags = GS_CHUNK_F_COMPRESSED;
		c->codec = w->compress.codec;
		c->transform = transform;
	}
	w->nchunks++;
out:
	pthread_mutex_unlock(&w->lock);
	if (rc || !f)
		return rc;
	atomic_fetch_add(&w->data_bytes, len);
	if (compressed)
		atomic_fetch_add(&w->compressed_chunks, 1);
	rc = write_payload(w, f, stored, stored_len, file_offset, err);
	if (rc)
		set_failed(w, err, rc);
	return rc;
}

int gs_image_write_chunk(struct gs_image_writer *w, uint64_t alloc_id, uint64_t offset, const void *data, size_t len,
			 struct gs_err *err)
{
	return write_chunk(w, alloc_id, offset, data, len, false, false, 0, 0, 0, err);
}

int gs_image_write_chunk_crc(struct gs_image_writer *w, uint64_t alloc_id, uint64_t offset, const void *data,
			     size_t len, uint32_t crc32c, struct gs_err *err)
{
	return write_chunk(w, alloc_id, offset, data, len, false, true, crc32c, 0, 0, err);
}

int gs_image_write_zero_chunk(struct gs_image_writer *w, uint64_t alloc_id, uint64_t offset, uint64_t len,
			      struct gs_err *err)
{
	return write_chunk(w, alloc_id, offset, NULL, len, true, false, 0, 0, 0, err);
}

int gs_image_writer_set_parent(struct gs_image_writer *w, const struct gs_image_parent *parent, struct gs_err *err)
{
	if (!parent->path || !*parent->path || strlen(parent->path) > GS_FMT_STRING_MAX)
		return gs_fail(err, GS_E_USAGE, "the parent image's path is empty or longer than %u bytes", GS_FMT_STRING_MAX);
	char *path = strdup(parent->path);
	if (!path)
		return gs_image_oom(err, "parent");
	int rc = 0;
	pthread_mutex_lock(&w->lock);
	if (w->nchunks || w->nfiles) {
		rc = gs_fail(err, GS_E_FAILURE, "an image's parent is set before its first chunk");
	} else if (w->store) {
		rc = gs_fail(err, GS_E_USAGE, "an image is either incremental or written into a chunk store, not both");
	} else {
		free((char *)w->parent.path);
		w->has_parent = true;
		w->parent = *parent;
		w->parent.path = path;
		path = NULL;
		w->info.format_version = GS_FMT_VERSION_PARENT; /* its data files are made with the first chunk */
	}
	pthread_mutex_unlock(&w->lock);
	free(path);
	return rc;
}

/*
 * Records c, a chunk whose bytes this image does not hold (its parent's, or
 * held elsewhere), after checking it lies within an added allocation that
 * holds data; `what` and `where` name it in the message when it does not.
 */
static int add_dataless_chunk_locked(struct gs_image_writer *w, const struct gs_image_chunk *c, const char *what,
				     const char *where, struct gs_err *err)
{
	if (w->failed)
		return get_failed_locked(w, err);
	ptrdiff_t ai = find_alloc_locked(w, c->alloc_id);
	if (ai < 0 || (w->allocs[ai].flags & GS_ALLOC_F_NO_DATA) || c->offset > w->allocs[ai].size ||
	    c->length > w->allocs[ai].size - c->offset)
		return gs_fail(err, GS_E_FAILURE, "%s %" PRIu64 "+%" PRIu64 "%s of allocation %" PRIu64
			       ", which was not added, holds no data or is smaller", what, c->offset, c->length, where,
			       c->alloc_id);
	if (grow((void **)&w->chunks, &w->cap_chunks, w->nchunks, sizeof(*w->chunks)))
		return gs_image_oom(err, "chunks");
	w->chunks[w->nchunks++] = *c;
	return 0;
}

int gs_image_write_parent_chunk(struct gs_image_writer *w, uint64_t alloc_id, uint64_t offset, uint64_t len,
				uint64_t parent_index, uint32_t crc32c, uint64_t fp_lo, uint64_t fp_hi, struct gs_err *err)
{
	if (!w->has_parent)
		return gs_fail(err, GS_E_FAILURE, "allocation %" PRIu64 ": a parent chunk in an image without a parent",
			       alloc_id);
	if (len == 0 || len > GS_FMT_CHUNK_DATA_MAX || (!fp_lo && !fp_hi))
		return gs_fail(err, GS_E_FAILURE, "allocation %" PRIu64 ": parent chunk at %" PRIu64 " of %" PRIu64
			       " bytes without a fingerprint or of a bad length", alloc_id, offset, len);
	pthread_mutex_lock(&w->lock);
	int rc = add_dataless_chunk_locked(w, &(struct gs_image_chunk){ .alloc_id = alloc_id, .offset = offset, .length = len,
									 .file_offset = parent_index,
									 .flags = GS_CHUNK_F_PARENT, .crc32c = crc32c,
									 .fp_lo = fp_lo, .fp_hi = fp_hi },
					   "parent chunk", "", err);
	if (!rc) {
		w->parent_chunks++;
		w->parent_bytes += len;
	}
	pthread_mutex_unlock(&w->lock);
	return rc;
}

int gs_image_writer_set_store(struct gs_image_writer *w, struct gs_store *st, const char *rec, struct gs_err *err)
{
	if (!rec)
		rec = gs_store_path(st);
	if (!*rec || strlen(rec) > GS_FMT_STRING_MAX)
		return gs_fail(err, GS_E_USAGE, "the chunk store's path is empty or longer than %u bytes", GS_FMT_STRING_MAX);
	char *path = strdup(rec);
	if (!path)
		return gs_image_oom(err, "store");
	int rc = 0;
	pthread_mutex_lock(&w->lock);
	if (w->nchunks || w->nfiles)
		rc = gs_fail(err, GS_E_FAILURE, "an image's chunk store is set before its first chunk");
	else if (w->has_parent)
		rc = gs_fail(err, GS_E_USAGE, "an image is either incremental or written into a chunk store, not both");
	if (!rc) {
		free((char *)w->store_rec.path);
		w->store_rec.path = path;
		path = NULL;
		memcpy(w->store_rec.store_id, gs_store_id(st), 16);
		w->store = st;
		w->info.format_version = GS_FMT_VERSION_STORE;
	}
	pthread_mutex_unlock(&w->lock);
	free(path);
	return rc;
}

int gs_image_write_stored_chunk(struct gs_image_writer *w, uint64_t alloc_id, uint64_t offset, uint64_t len,
				uint32_t crc32c, uint64_t fp_lo, uint64_t fp_hi, struct gs_err *err)
{
	if (!w->store)
		return gs_fail(err, GS_E_FAILURE, "allocation %" PRIu64 ": a stored chunk in an image without a chunk store",
			       alloc_id);
	if (len == 0 || len > GS_FMT_CHUNK_DATA_MAX || (!fp_lo && !fp_hi))
		return gs_fail(err, GS_E_FAILURE, "allocation %" PRIu64 ": stored chunk at %" PRIu64 " of %" PRIu64
			       " bytes without a fingerprint or of a bad length", alloc_id, offset, len);
	pthread_mutex_lock(&w->lock);
	int rc = add_dataless_chunk_locked(w, &(struct gs_image_chunk){ .alloc_id = alloc_id, .offset = offset, .length = len,
									 .flags = GS_CHUNK_F_STORED, .crc32c = crc32c,
									 .fp_lo = fp_lo, .fp_hi = fp_hi },
					   "stored chunk", "", err);
	if (!rc) {
		w->store_chunks++;
		w->store_bytes += len;
	}
	pthread_mutex_unlock(&w->lock);
	if (!rc)
		atomic_fetch_add(&w->data_bytes, len);
	return rc;
}

int gs_image_writer_set_partial(struct gs_image_writer *w, struct gs_err *err)
{
	int rc = 0;
	pthread_mutex_lock(&w->lock);
	if (w->nchunks || w->nfiles) {
		rc = gs_fail(err, GS_E_FAILURE, "an image is made partial before its first chunk");
	} else {
		w->partial = true;
		if (w->info.format_version < GS_FMT_VERSION_PARTIAL)
			w->info.format_version = GS_FMT_VERSION_PARTIAL; /* its data files are made with the first chunk */
	}
	pthread_mutex_unlock(&w->lock);
	return rc;
}

int gs_image_write_elsewhere_chunk(struct gs_image_writer *w, uint64_t alloc_id, uint64_t offset, uint64_t len,
				   struct gs_err *err)
{
	if (!w->partial)
		return gs_fail(err, GS_E_FAILURE, "allocation %" PRIu64 ": a chunk held elsewhere in an image not made "
			       "partial", alloc_id);
	if (len == 0)
		return gs_fail(err, GS_E_FAILURE, "allocation %" PRIu64 ": empty chunk at offset %" PRIu64, alloc_id, offset);
	pthread_mutex_lock(&w->lock);
	int rc = add_dataless_chunk_locked(w, &(struct gs_image_chunk){ .alloc_id = alloc_id, .offset = offset, .length = len,
									 .flags = GS_CHUNK_F_ELSEWHERE },
					   "chunk", " held elsewhere", err);
	pthread_mutex_unlock(&w->lock);
	return rc;
}

int gs_image_write_chunk_fp(struct gs_image_writer *w, uint64_t alloc_id, uint64_t offset, const void *data,
			    size_t len, uint64_t fp_lo, uint64_t fp_hi, struct gs_err *err)
{
	return write_chunk(w, alloc_id, offset, data, len, false, false, 0, fp_lo, fp_hi, err);
}

/* --------------------------------------------------------------- commit */

static int cmp_gpu(const void *a, const void *b)
{
	uint32_t x = ((const struct gs_image_gpu *)a)->index, y = ((const struct gs_image_gpu *)b)->index;
	return x < y ? -1 : x > y;
}

static int cmp_alloc(const void *a, const void *b)
{
	uint64_t x = ((const struct gs_image_allocation *)a)->id, y = ((const struct gs_image_allocation *)b)->id;
	return x < y ? -1 : x > y;
}

static int cmp_chunk(const void *a, const void *b)
{
	const struct gs_image_chunk *x = a, *y = b;
	if (x->alloc_id != y->alloc_id)
		return x->alloc_id < y->alloc_id ? -1 : 1;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Builds the manifest model from the writer's tables (sorted in place) and checks it. */
static int build_manifest(struct gs_image_writer *w, struct gs_manifest *m, struct gs_image_data_file *files,
			  struct gs_err *err)
{
	if (w->ngpus)
		qsort(w->gpus, w->ngpus, sizeof(*w->gpus), cmp_gpu);
	if (w->nallocs)
		qsort(w->allocs, w->nallocs, sizeof(*w->allocs), cmp_alloc);
	if (w->nchunks)
		qsort(w->chunks, w->nchunks, sizeof(*w->chunks), cmp_chunk);
	free(w->alloc_slots); /* ids moved; no lookups after this point */
	w->alloc_slots = NULL;
	for (size_t i = 0; i < w->nfiles; i++)
		files[i] = (struct gs_image_data_file){ .index = (uint32_t)i, .size = w->files[i]->next,
							.name = w->files[i]->name };
	memset(m, 0, sizeof(*m));
	m->info = w->info;
	m->files = files;
	m->nfiles = w->nfiles;
	m->gpus = w->gpus;
	m->ngpus = w->ngpus;
	m->allocs = w->allocs;
	m->nallocs = w->nallocs;
	m->chunks = w->chunks;
	m->nchunks = w->nchunks;
	m->meta = w->meta;
	m->nmeta = w->nmeta;
	m->has_parent = w->has_parent;
	m->parent = w->parent;
	m->has_store = w->store != NULL;
	m->store = w->store_rec;
	int rc = gs_manifest_validate(m, err);
	if (rc) {
		gs_err_wrap(err, "refusing to commit an inconsistent image");
		if (err)
			err->code = GS_E_FAILURE;
		return GS_E_FAILURE;
	}
	return 0;
}

static int sync_data_files(struct gs_image_writer *w, struct gs_err *err)
{
	for (size_t i = 0; i < w->nfiles; i++) {
		struct data_file *f = w->files[i];
		/* The size is a multiple of 4096 (the last payload's padding is a hole), so readers may read whole blocks. */
		if (ftruncate(f->fd, (off_t)f->next) < 0 || (!w->no_data_sync && fsync(f->fd) < 0))
			return io_fail(w, "syncing", f->name, errno, err);
		if (f->direct_fd >= 0) {
			close(f->direct_fd);
			f->direct_fd = -1;
		}
	}
	return 0;
}

static int write_manifest(struct gs_image_writer *w, const struct gs_manifest *m, struct gs_err *err)
{
	void *buf;
	size_t len;
	int rc = gs_manifest_encode(m, &buf, &len, err);
	if (rc)
		return rc;
	int fd = openat(w->tmp_fd, GS_FMT_MANIFEST_NAME, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = io_fail(w, "creating", GS_FMT_MANIFEST_NAME, errno, err);
	} else {
		int e = gs_image_write_all(fd, buf, len, 0);
		if (!e && fsync(fd) < 0)
			e = -errno;
		if (e)
			rc = io_fail(w, "writing", GS_FMT_MANIFEST_NAME, -e, err);
		if (close(fd) < 0 && !rc)
			rc = io_fail(w, "closing", GS_FMT_MANIFEST_NAME, errno, err);
	}
	free(buf);
	return rc;
}


/* Steps 4-6 of the commit protocol (docs/FORMAT.md): validate, sync the data files, write and sync the manifest. */
static int seal(struct gs_image_writer *w, struct gs_err *err)
{
	pthread_mutex_lock(&w->lock);
	int rc = w->failed ? get_failed_locked(w, err) : 0;
	pthread_mutex_unlock(&w->lock);
	if (rc)
		return rc;

	struct gs_image_data_file *files = calloc(w->nfiles ? w->nfiles : 1, sizeof(*files));
	if (!files)
		return gs_image_oom(err, "manifest");
	struct gs_manifest m;
	/* the store's objects durable before a manifest names them (FORMAT.md 9.1) */
	if (w->store && (rc = gs_store_sync(w->store, err)))
		return set_failed(w, err, rc);
	if (!(rc = build_manifest(w, &m, files, err)) && !(rc = sync_data_files(w, err))) {
		rc = write_manifest(w, &m, err);
		if (!rc && fsync(w->tmp_fd) < 0)
			rc = io_fail(w, "syncing", ".", errno, err);
	}
	free(m.alloc_chunk_start);
	free(files);
	return rc;
}

/* Removes what the writer made (manifest first), leaving the directory itself to its owner. */
static void remove_own_files(struct gs_image_writer *w)
{
	if (unlinkat(w->tmp_fd, GS_FMT_MANIFEST_NAME, 0) == 0)
		fsync(w->tmp_fd);
	for (size_t i = 0; i < w->nfiles; i++)
		unlinkat(w->tmp_fd, w->files[i]->name, 0);
}

int gs_image_writer_seal(struct gs_image_writer *w, struct gs_err *err)
{
	int rc = seal(w, err);
	if (rc)
		remove_own_files(w);
	writer_free(w);
	return rc;
}

void gs_image_writer_abort(struct gs_image_writer *w)
{
	if (!w)
		return;
	remove_own_files(w);
	writer_free(w);
}
