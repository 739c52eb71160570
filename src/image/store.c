/*
 * store.c - the chunk store (store.h, FORMAT.md 4.12 and 9.1): its header,
 * objects named by content and written once, the ref files dumps register
 * by, reads of objects for images, and gc.
 *
 * Objects are found by name: a dump that knows a chunk's fingerprint and
 * length (from the GPU, before any copy) looks for "<fp>-*-<length>" in the
 * object's directory; one that has the bytes names it whole. Objects are
 * never rewritten: a name says what the bytes are, so two dumps that make
 * the same object at once both succeed (the second rename finds it there).
 */
#define LOG_PREFIX "store: "
#include "image/store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fault.h"
#include "common/log.h"
#include "common/proc.h"
#include "common/util.h"
#include "image/codec.h"
#include "image/crc32c.h"
#include "image/image.h"
#include "image/image_fs.h"
#include "image/image_tmp.h"
#include "image/manifest.h"

struct gs_store {
	char *path;
	int dir_fd, objects_fd, refs_fd, tmp_fd;
	int lock_fd;      /* STORE/lock: shared around each put/claim, exclusive for gc */
	uint8_t id[16];
	int ref_fd;       /* the dump's ref (O_APPEND), shared flock held; -1: none */
	char ref_name[64];
	pthread_mutex_t mu; /* the shared lock's holders in this process (one flock per open file) */
	unsigned lock_holders;
	uint64_t tmp_seq;
	uint8_t dirty[256]; /* objects/XX directories an object was renamed into, to fsync before a seal */
};

/* ------------------------------------------------------------ names and headers */

void gs_store_object_name(uint64_t fp_lo, uint64_t fp_hi, uint32_t crc32c, uint64_t length,
			  char name[GS_STORE_OBJECT_NAME_MAX])
{
	snprintf(name, GS_STORE_OBJECT_NAME_MAX, GS_STORE_OBJECT_NAME_FMT, fp_hi, fp_lo, crc32c, length);
}

void gs_store_object_path(const char *name, char *path, size_t n)
{
	snprintf(path, n, GS_STORE_OBJECTS_DIR "/%.2s/%s", name, name);
}

static bool hex_field(const char *s, size_t len, uint64_t *v)
{
	if (len == 0 || len > 16)
		return false;
	uint64_t x = 0;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
		if (d < 0)
			return false;
		x = x << 4 | (uint64_t)d;
	}
	*v = x;
	return true;
}

bool gs_store_object_name_parse(const char *name, uint64_t *fp_lo, uint64_t *fp_hi, uint32_t *crc32c, uint64_t *length)
{
	size_t n = strlen(name);
	uint64_t hi, lo, crc, len;
	if (n < 32 + 1 + 8 + 2 || name[32] != '-' || name[41] != '-' || !hex_field(name, 16, &hi) ||
	    !hex_field(name + 16, 16, &lo) || !hex_field(name + 33, 8, &crc) || !hex_field(name + 42, n - 42, &len) ||
	    name[42] == '0' || len == 0)
		return false;
	*fp_lo = lo;
	*fp_hi = hi;
	*crc32c = (uint32_t)crc;
	*length = len;
	return true;
}

void gs_store_object_header_build(struct gs_fmt_object_header *h, const struct gs_store_object *o)
{
	memset(h, 0, sizeof(*h));
	memcpy(h->magic, GS_FMT_OBJECT_MAGIC, GS_FMT_MAGIC_LEN);
	h->version = GS_FMT_STORE_VERSION;
	h->header_size = sizeof(*h);
	h->length = o->length;
	h->stored_length = o->stored_length;
	h->fp_lo = o->fp_lo;
	h->fp_hi = o->fp_hi;
	h->crc32c = o->crc32c;
	h->stored_crc32c = o->stored_crc32c;
	h->codec = o->codec;
	h->transform = o->transform;
	h->header_crc32c = gs_crc32c(0, h, offsetof(struct gs_fmt_object_header, header_crc32c));
}

int gs_store_object_header_parse(const void *buf, size_t len, struct gs_store_object *o, uint32_t *header_size,
				 const char **why)
{
	struct gs_fmt_object_header h;
	if (len < sizeof(h)) {
		*why = "it is shorter than an object's header";
		return -1;
	}
	memcpy(&h, buf, sizeof(h));
	if (memcmp(h.magic, GS_FMT_OBJECT_MAGIC, GS_FMT_MAGIC_LEN)) {
		*why = "it is not a chunk store object (bad magic)";
		return -1;
	}
	if (h.header_crc32c != gs_crc32c(0, &h, offsetof(struct gs_fmt_object_header, header_crc32c))) {
		*why = "its header is corrupt (checksum mismatch)";
		return -1;
	}
	if (h.version != GS_FMT_STORE_VERSION) {
		*why = "it is of an unknown store version (written by a newer gpusnap?)";
		return -1;
	}
	if (h.header_size < sizeof(h) || h.header_size > GS_FMT_ALIGN) {
		*why = "its header size is invalid";
		return -1;
	}
	if (h.length == 0 || h.length > GS_FMT_CHUNK_DATA_MAX || (!h.fp_lo && !h.fp_hi)) {
		*why = "its header has an invalid length or no fingerprint";
		return -1;
	}
	if (h.codec > GS_CODEC_MAX || h.transform > GS_XFORM_MAX) {
		*why = "it is compressed with an unknown codec or transform (written by a newer gpusnap?)";
		return -1;
	}
	if (h.codec == GS_CODEC_NONE ? (h.stored_length != h.length || h.stored_crc32c != h.crc32c || h.transform)
				     : (h.stored_length == 0 || h.stored_length >= h.length)) {
		*why = "its header's stored length, checksum or codec disagree";
		return -1;
	}
	*o = (struct gs_store_object){ .length = h.length, .stored_length = h.stored_length, .fp_lo = h.fp_lo,
				       .fp_hi = h.fp_hi, .crc32c = h.crc32c, .stored_crc32c = h.stored_crc32c,
				       .codec = h.codec, .transform = h.transform };
	*header_size = h.header_size;
	return 0;
}

/* ---------------------------------------------------------------- open */

static int open_sub(struct gs_store *s, const char *name, bool create, int *fd, struct gs_err *err)
{
	if (create && mkdirat(s->dir_fd, name, 0700) < 0 && errno != EEXIST)
		return gs_fail_errno(err, gs_image_errno_code(errno), errno, "cannot create '%s/%s'", s->path, name);
	*fd = openat(s->dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", s->path, name);
	if (*fd < 0)
		return gs_fail_errno(err, errno == ENOENT || errno == ELOOP || errno == ENOTDIR ? GS_E_IMAGE : GS_E_FAILURE,
				     errno, "chunk store '%s': cannot open '%s'", s->path, name);
	struct stat st;
	if (fstat(*fd, &st) < 0)
		return gs_fail_errno(err, GS_E_FAILURE, errno, "cannot stat '%s'", p);
	return gs_fs_check_entry(&st, p, err);
}

static int write_header(struct gs_store *s, struct gs_err *err)
{
	struct gs_fmt_store_header h = { .version = GS_FMT_STORE_VERSION, .header_size = sizeof(h) };
	memcpy(h.magic, GS_FMT_STORE_MAGIC, GS_FMT_MAGIC_LEN);
	gs_image_random_id(h.store_id);
	h.crc32c = gs_crc32c(0, &h, offsetof(struct gs_fmt_store_header, crc32c));
	char tmp[64];
	snprintf(tmp, sizeof(tmp), ".%s.tmp-%d", GS_STORE_HEADER_NAME, (int)getpid());
	int fd = openat(s->dir_fd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	int e = fd < 0 ? errno : 0;
	if (!e) {
		int w = gs_image_write_all(fd, &h, sizeof(h), 0);
		e = w ? -w : fsync(fd) < 0 ? errno : 0;
		close(fd);
	}
	if (!e && renameat(s->dir_fd, tmp, s->dir_fd, GS_STORE_HEADER_NAME) < 0)
		e = errno;
	if (e) {
		unlinkat(s->dir_fd, tmp, 0);
		return gs_fail_errno(err, gs_image_errno_code(e), e, "cannot create the chunk store '%s'", s->path);
	}
	return 0;
}

static int read_header(struct gs_store *s, bool create, struct gs_err *err)
{
	int fd;
	struct stat st;
	bool missing = false;
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", s->path, GS_STORE_HEADER_NAME);
	int rc = gs_fs_open_file(s->dir_fd, GS_STORE_HEADER_NAME, p, &fd, &st, &missing, err);
	if (rc) {
		if (missing)
			return gs_fail(err, create ? GS_E_USAGE : GS_E_IMAGE, "'%s' is not a gpusnap chunk store (it has no %s)",
				       s->path, GS_STORE_HEADER_NAME);
		return rc;
	}
	struct gs_fmt_store_header h;
	int r = st.st_size >= (off_t)sizeof(h) ? gs_fs_pread_full(fd, &h, sizeof(h), 0) : -EIO;
	close(fd);
	if (r || memcmp(h.magic, GS_FMT_STORE_MAGIC, GS_FMT_MAGIC_LEN))
		return gs_fail(err, create ? GS_E_USAGE : GS_E_IMAGE, "'%s' is not a gpusnap chunk store (%s is not a store "
			       "header)", s->path, GS_STORE_HEADER_NAME);
	if (h.crc32c != gs_crc32c(0, &h, offsetof(struct gs_fmt_store_header, crc32c)))
		return gs_fail(err, GS_E_IMAGE, "chunk store '%s': %s is corrupt (checksum mismatch)", s->path,
			       GS_STORE_HEADER_NAME);
	if (h.version != GS_FMT_STORE_VERSION || h.flags)
		return gs_fail(err, GS_E_IMAGE, "chunk store '%s' is of store version %" PRIu32 " (flags 0x%" PRIx32
			       "); this gpusnap reads version %u", s->path, h.version, h.flags, GS_FMT_STORE_VERSION);
	memcpy(s->id, h.store_id, 16);
	return 0;
}

/* An empty directory: one a store may be made in. */
static bool dir_empty(int fd)
{
	int d = dup(fd);
	DIR *dp = d >= 0 ? fdopendir(d) : NULL;
	if (!dp) {
		if (d >= 0)
			close(d);
		return false;
	}
	rewinddir(dp);
	bool empty = true;
	struct dirent *e;
	while ((e = readdir(dp)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			empty = false;
			break;
		}
	closedir(dp);
	return empty;
}

/* mkdir path (0700) where it is missing, its parent checked first as a writer checks DIR's (FORMAT.md 8). */
static int make_dir(const char *path, struct gs_err *err)
{
	struct stat st;
	if (lstat(path, &st) == 0 || errno != ENOENT)
		return 0; /* there (or not ours to make): the open says what it is */
	char parent[PATH_MAX];
	snprintf(parent, sizeof(parent), "%s", path);
	char *slash = strrchr(parent, '/');
	const char *base = slash ? slash + 1 : parent;
	if (slash)
		*slash = '\0';
	int pfd;
	int rc = gs_fs_open_dir_checked(slash ? (*parent ? parent : "/") : ".", path, &pfd, &st, err);
	if (rc < 0)
		return gs_fail_errno(err, -rc == ENOENT || -rc == ENOTDIR ? GS_E_USAGE : GS_E_FAILURE, -rc,
				     "cannot create the chunk store '%s'", path);
	if (rc)
		return rc;
	rc = 0;
	if (mkdirat(pfd, base, 0700) < 0 && errno != EEXIST)
		rc = gs_fail_errno(err, gs_image_errno_code(errno), errno, "cannot create the chunk store '%s'", path);
	close(pfd);
	return rc;
}

int gs_store_open(const char *path, bool create, struct gs_store **sp, struct gs_err *err)
{
	*sp = NULL;
	struct gs_store *s = calloc(1, sizeof(*s));
	if (!s || !(s->path = strdup(path))) {
		free(s);
		return gs_image_oom(err, "chunk store");
	}
	s->dir_fd = s->objects_fd = s->refs_fd = s->tmp_fd = s->lock_fd = s->ref_fd = -1;
	pthread_mutex_init(&s->mu, NULL);
	int rc;
	struct stat st;
	if (create && (rc = make_dir(path, err)))
		goto fail;
	rc = gs_fs_open_dir_checked(path, path, &s->dir_fd, &st, err);
	if (rc < 0) {
		int e = -rc;
		rc = e == ENOENT ? gs_fail(err, create ? GS_E_USAGE : GS_E_IMAGE, "no chunk store at '%s'", path)
				 : gs_fail_errno(err, e == ENOTDIR ? (create ? GS_E_USAGE : GS_E_IMAGE) : e == EACCES ||
							       e == EPERM ? GS_E_PERMISSION : GS_E_FAILURE, e,
						 "cannot open the chunk store '%s'", path);
		goto fail;
	}
	if (rc || (rc = gs_fs_check_trusted(&st, path, err)))
		goto fail;
	if (create && faccessat(s->dir_fd, GS_STORE_HEADER_NAME, F_OK, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT &&
	    dir_empty(s->dir_fd)) {
		if (st.st_uid != geteuid() || (st.st_mode & 077)) {
			rc = gs_fail(err, GS_E_PERMISSION, "'%s' is to become a chunk store: it must be a directory of this user "
				     "with mode 0700", path);
			goto fail;
		}
		if ((rc = write_header(s, err)))
			goto fail;
		pr_info("created the chunk store '%s'", path);
	}
	if ((rc = read_header(s, create, err)))
		goto fail;
	if ((rc = open_sub(s, GS_STORE_OBJECTS_DIR, create, &s->objects_fd, err)) ||
	    (rc = open_sub(s, GS_STORE_REFS_DIR, create, &s->refs_fd, err)) ||
	    (rc = open_sub(s, GS_STORE_TMP_DIR, create, &s->tmp_fd, err)))
		goto fail;
	s->lock_fd = openat(s->dir_fd, GS_STORE_LOCK_NAME, (create ? O_RDWR | O_CREAT : O_RDONLY) | O_NOFOLLOW | O_CLOEXEC,
			    0600);
	if (s->lock_fd < 0 && !create && errno == ENOENT)
		s->lock_fd = -1; /* a reader needs no lock */
	else if (s->lock_fd < 0) {
		rc = gs_fail_errno(err, gs_image_errno_code(errno), errno, "chunk store '%s': cannot open its %s", path,
				   GS_STORE_LOCK_NAME);
		goto fail;
	}
	if (create) {
		/* the store's directories durable before any image names it */
		fsync(s->dir_fd);
		gs_fs_fsync_dir(path);
	}
	*sp = s;
	return 0;
fail:
	gs_store_close(s);
	return rc;
}

void gs_store_close(struct gs_store *s)
{
	if (!s)
		return;
	int fds[] = { s->ref_fd, s->lock_fd, s->tmp_fd, s->refs_fd, s->objects_fd, s->dir_fd };
	for (size_t i = 0; i < GS_ARRAY_SIZE(fds); i++)
		if (fds[i] >= 0)
			close(fds[i]);
	pthread_mutex_destroy(&s->mu);
	free(s->path);
	free(s);
}

const char *gs_store_path(const struct gs_store *s) { return s->path; }
const uint8_t *gs_store_id(const struct gs_store *s) { return s->id; }

/* ------------------------------------------------------------ the shared lock */

static int lock_shared(struct gs_store *s, struct gs_err *err)
{
	if (s->lock_fd < 0)
		return gs_fail(err, GS_E_FAILURE, "chunk store '%s' was opened for reading", s->path);
	pthread_mutex_lock(&s->mu);
	int rc = 0;
	if (s->lock_holders == 0) {
		while (flock(s->lock_fd, LOCK_SH) < 0 && errno == EINTR)
			;
	}
	s->lock_holders++;
	pthread_mutex_unlock(&s->mu);
	return rc;
}

static void unlock_shared(struct gs_store *s)
{
	pthread_mutex_lock(&s->mu);
	if (--s->lock_holders == 0)
		flock(s->lock_fd, LOCK_UN);
	pthread_mutex_unlock(&s->mu);
}

/* ------------------------------------------------------------------ refs */

static int ref_append(struct gs_store *s, const char *line, struct gs_err *err)
{
	size_t n = strlen(line);
	ssize_t w = write(s->ref_fd, line, n); /* O_APPEND: one write, never interleaved with another thread's */
	if (w != (ssize_t)n) {
		int e = w < 0 ? errno : ENOSPC;
		return gs_fail_errno(err, gs_image_errno_code(e), e, "chunk store '%s': cannot write its ref '%s'", s->path,
				     s->ref_name);
	}
	return 0;
}

int gs_store_ref_create(struct gs_store *s, const char *image, char *name, size_t n, struct gs_err *err)
{
	if (strchr(image, '\n'))
		return gs_fail(err, GS_E_USAGE, "the image path '%s' holds a newline, which a store's ref cannot name", image);
	uint8_t rnd[8];
	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
		memset(rnd, 0, sizeof(rnd));
	uint64_t r;
	memcpy(&r, rnd, sizeof(r));
	char tmp[80];
	snprintf(s->ref_name, sizeof(s->ref_name), "%d-%016" PRIx64 GS_STORE_REF_SUFFIX, (int)getpid(), r);
	snprintf(tmp, sizeof(tmp), ".%s", s->ref_name);
	/* made under a dot name, locked, written and synced, then renamed in: gc never sees a ref unlocked before its dump is gone */
	/* under the store's shared lock: gc (exclusive) never sees it between its creation and its flock */
	int rc = lock_shared(s, err);
	if (rc)
		return rc;
	int fd = openat(s->refs_fd, tmp, O_RDWR | O_CREAT | O_EXCL | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = gs_fail_errno(err, gs_image_errno_code(errno), errno, "chunk store '%s': cannot create a ref", s->path);
		unlock_shared(s);
		return rc;
	}
	s->ref_fd = fd;
	if (flock(fd, LOCK_SH) < 0)
		rc = gs_fail_errno(err, GS_E_FAILURE, errno, "chunk store '%s': cannot lock its ref", s->path);
	char line[PATH_MAX + 16];
	snprintf(line, sizeof(line), "image %s\n", image);
	if (!rc)
		rc = ref_append(s, line, err);
	if (!rc && fsync(fd) < 0)
		rc = gs_fail_errno(err, gs_image_errno_code(errno), errno, "chunk store '%s': cannot sync its ref", s->path);
	if (!rc && renameat(s->refs_fd, tmp, s->refs_fd, s->ref_name) < 0)
		rc = gs_fail_errno(err, gs_image_errno_code(errno), errno, "chunk store '%s': cannot create a ref", s->path);
	if (!rc && fsync(s->refs_fd) < 0)
		rc = gs_fail_errno(err, gs_image_errno_code(errno), errno, "chunk store '%s': cannot sync refs/", s->path);
	unlock_shared(s);
	if (rc) {
		unlinkat(s->refs_fd, tmp, 0);
		unlinkat(s->refs_fd, s->ref_name, 0);
		close(fd);
		s->ref_fd = -1;
		return rc;
	}
	snprintf(name, n, "%s", s->ref_name);
	return 0;
}

int gs_store_ref_attach(struct gs_store *s, const char *name, struct gs_err *err)
{
	if (!*name || strchr(name, '/') || name[0] == '.' || strlen(name) >= sizeof(s->ref_name))
		return gs_fail(err, GS_E_USAGE, "'%s' is not a ref of a chunk store", name);
	int fd = openat(s->refs_fd, name, O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return gs_fail_errno(err, GS_E_FAILURE, errno, "chunk store '%s': cannot open its ref '%s'", s->path, name);
	if (flock(fd, LOCK_SH) < 0) {
		close(fd);
		return gs_fail_errno(err, GS_E_FAILURE, errno, "chunk store '%s': cannot lock its ref '%s'", s->path, name);
	}
	s->ref_fd = fd;
	snprintf(s->ref_name, sizeof(s->ref_name), "%s", name);
	return 0;
}

int gs_store_ref_set_image(struct gs_store *s, const char *image, struct gs_err *err)
{
	if (s->ref_fd < 0 || strchr(image, '\n'))
		return gs_fail(err, GS_E_FAILURE, "chunk store '%s': no ref to name '%s' in", s->path, image);
	char line[PATH_MAX + 16];
	snprintf(line, sizeof(line), "image %s\n", image);
	int rc = ref_append(s, line, err);
	if (!rc && fsync(s->ref_fd) < 0)
		rc = gs_fail_errno(err, gs_image_errno_code(errno), errno, "chunk store '%s': cannot sync its ref", s->path);
	return rc;
}

void gs_store_ref_remove(struct gs_store *s)
{
	if (s->ref_fd >= 0 && unlinkat(s->refs_fd, s->ref_name, 0) == 0)
		fsync(s->refs_fd);
}

/* ---------------------------------------------------------------- write */

int gs_store_find(struct gs_store *s, uint64_t fp_lo, uint64_t fp_hi, uint64_t length, uint32_t *crc32c)
{
	char pre[40], sub[8], suf[24];
	snprintf(pre, sizeof(pre), "%016" PRIx64 "%016" PRIx64 "-", fp_hi, fp_lo);
	snprintf(sub, sizeof(sub), "%.2s", pre);
	snprintf(suf, sizeof(suf), "-%" PRIx64, length);
	int fd = openat(s->objects_fd, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return 0;
	}
	int found = 0;
	struct dirent *e;
	while (!found && (e = readdir(d))) {
		uint64_t lo, hi, len;
		uint32_t crc;
		if (!strncmp(e->d_name, pre, strlen(pre)) && gs_store_object_name_parse(e->d_name, &lo, &hi, &crc, &len) &&
		    lo == fp_lo && hi == fp_hi && len == length) {
			*crc32c = crc;
			found = 1;
		}
	}
	closedir(d);
	return found;
}

static bool object_exists(struct gs_store *s, const char *name)
{
	char rel[GS_STORE_OBJECT_NAME_MAX + 16];
	snprintf(rel, sizeof(rel), "%.2s/%s", name, name);
	struct stat st;
	return fstatat(s->objects_fd, rel, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
}

int gs_store_claim(struct gs_store *s, size_t n, char (*names)[GS_STORE_OBJECT_NAME_MAX], bool *present,
		   struct gs_err *err)
{
	if (s->ref_fd < 0)
		return gs_fail(err, GS_E_FAILURE, "chunk store '%s': objects claimed without a ref", s->path);
	int rc = lock_shared(s, err);
	if (rc)
		return rc;
	for (size_t i = 0; !rc && i < n; i++) {
		char line[GS_STORE_OBJECT_NAME_MAX + 16];
		snprintf(line, sizeof(line), "object %s\n", names[i]);
		rc = ref_append(s, line, err);
	}
	for (size_t i = 0; !rc && i < n; i++)
		present[i] = object_exists(s, names[i]);
	unlock_shared(s);
	return rc;
}

/* Writes the object into tmp/ and renames it in; 0, or a code with err (nothing left behind). */
static int create_object(struct gs_store *s, const char *name, const struct gs_store_object *o, const void *payload,
			 bool *created, struct gs_err *err)
{
	char tmp[128], sub[4];
	pthread_mutex_lock(&s->mu);
	uint64_t seq = ++s->tmp_seq;
	pthread_mutex_unlock(&s->mu);
	/* named after the ref: gc removes a dead dump's temporary objects with its ref */
	size_t stem = strlen(s->ref_name) - strlen(GS_STORE_REF_SUFFIX);
	snprintf(tmp, sizeof(tmp), "%.*s.%" PRIu64, (int)stem, s->ref_name, seq);
	snprintf(sub, sizeof(sub), "%.2s", name);
	int fd = openat(s->tmp_fd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	int e = fd < 0 ? errno : 0;
	if (!e) {
		struct gs_fmt_object_header h;
		gs_store_object_header_build(&h, o);
		int w = gs_image_write_all(fd, &h, sizeof(h), 0);
		if (!w)
			w = gs_image_write_all(fd, payload, o->stored_length, sizeof(h));
		e = w ? -w : fsync(fd) < 0 ? errno : 0;
		close(fd);
	}
	if (!e && mkdirat(s->objects_fd, sub, 0700) < 0 && errno != EEXIST)
		e = errno;
	if (!e) {
		int dfd = openat(s->objects_fd, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (dfd < 0) {
			e = errno;
		} else {
			if (renameat2(s->tmp_fd, tmp, dfd, name, RENAME_NOREPLACE) < 0) {
				if (errno == EEXIST) /* another dump made it meanwhile: the same bytes */
					unlinkat(s->tmp_fd, tmp, 0);
				else
					e = errno;
			} else {
				*created = true;
			}
			close(dfd);
		}
	}
	if (e) {
		unlinkat(s->tmp_fd, tmp, 0);
		if (e == ENOSPC || e == EDQUOT)
			return gs_fail(err, GS_E_NO_SPACE, "chunk store '%s': no space left for object '%s' (%s)", s->path, name,
				       strerror(e));
		return gs_fail_errno(err, gs_image_errno_code(e), e, "chunk store '%s': cannot write object '%s'", s->path,
				     name);
	}
	pthread_mutex_lock(&s->mu);
	s->dirty[strtoul(sub, NULL, 16) & 0xff] = 1;
	pthread_mutex_unlock(&s->mu);
	return 0;
}

int gs_store_put(struct gs_store *s, const struct gs_store_object *o, const void *payload, bool *created,
		 struct gs_err *err)
{
	*created = false;
	if (s->ref_fd < 0)
		return gs_fail(err, GS_E_FAILURE, "chunk store '%s': an object written without a ref", s->path);
	char name[GS_STORE_OBJECT_NAME_MAX];
	gs_store_object_name(o->fp_lo, o->fp_hi, o->crc32c, o->length, name);
	int rc = lock_shared(s, err);
	if (rc)
		return rc;
	char line[GS_STORE_OBJECT_NAME_MAX + 16];
	snprintf(line, sizeof(line), "object %s\n", name);
	rc = ref_append(s, line, err);
	if (!rc && !object_exists(s, name))
		rc = create_object(s, name, o, payload, created, err);
	unlock_shared(s);
	return rc;
}

int gs_store_sync(struct gs_store *s, struct gs_err *err)
{
	for (unsigned i = 0; i < 256; i++) {
		if (!s->dirty[i])
			continue;
		char sub[4];
		snprintf(sub, sizeof(sub), "%02x", i);
		int fd = openat(s->objects_fd, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0 || fsync(fd) < 0) {
			int e = errno;
			if (fd >= 0)
				close(fd);
			return gs_fail_errno(err, gs_image_errno_code(e), e, "chunk store '%s': cannot sync '%s/%s'", s->path,
					     GS_STORE_OBJECTS_DIR, sub);
		}
		close(fd);
		s->dirty[i] = 0;
	}
	if (fsync(s->objects_fd) < 0)
		return gs_fail_errno(err, gs_image_errno_code(errno), errno, "chunk store '%s': cannot sync '%s'", s->path,
				     GS_STORE_OBJECTS_DIR);
	return 0;
}

/* ----------------------------------------------------------------- read */

/* Opens want's object, checks its header against want; fd and the header's size out. */
static int open_object(struct gs_store *s, const struct gs_store_object *want, struct gs_store_object *got, int *fd,
		       uint32_t *hsize, char *path, size_t n, struct gs_err *err)
{
	char name[GS_STORE_OBJECT_NAME_MAX], rel[GS_STORE_OBJECT_NAME_MAX + 16];
	gs_store_object_name(want->fp_lo, want->fp_hi, want->crc32c, want->length, name);
	snprintf(rel, sizeof(rel), "%.2s/%s", name, name);
	snprintf(path, n, "%s/%s/%s", s->path, GS_STORE_OBJECTS_DIR, rel);
	struct stat st;
	bool missing = false;
	struct gs_err e2 = { 0 };
	int rc = gs_fs_open_file(s->objects_fd, rel, path, fd, &st, &missing, &e2);
	if (rc) {
		*fd = -1;
		if (missing)
			return gs_fail(err, GS_E_IMAGE, "store object '%s' is missing", path);
		if (err)
			*err = e2;
		return rc;
	}
	unsigned char hb[sizeof(struct gs_fmt_object_header)];
	const char *why = NULL;
	int r = st.st_size >= (off_t)sizeof(hb) ? gs_fs_pread_full(*fd, hb, sizeof(hb), 0) : -EIO;
	if (r == 0 && gs_fault(GS_FI_IMAGE_READ))
		r = -gs_fault_errno(GS_FI_IMAGE_READ, EIO);
	if (r && st.st_size >= (off_t)sizeof(hb))
		rc = gs_fail_errno(err, GS_E_IMAGE, -r, "store object '%s' cannot be read", path);
	else if (r || gs_store_object_header_parse(hb, sizeof(hb), got, hsize, &why))
		rc = gs_fail(err, GS_E_IMAGE, "store object '%s' is damaged: %s", path,
			     why ? why : "it is shorter than an object's header");
	else if (got->length != want->length || got->crc32c != want->crc32c || got->fp_lo != want->fp_lo ||
		 got->fp_hi != want->fp_hi)
		rc = gs_fail(err, GS_E_IMAGE, "store object '%s' is damaged: its header describes other bytes than its name",
			     path);
	else if ((uint64_t)st.st_size != *hsize + got->stored_length)
		rc = gs_fail(err, GS_E_IMAGE, "store object '%s' is damaged: %lld bytes, its header says %" PRIu64, path,
			     (long long)st.st_size, *hsize + got->stored_length);
	if (rc) {
		close(*fd);
		*fd = -1;
	}
	return rc;
}

int gs_store_check_object(struct gs_store *s, const struct gs_store_object *want, char *path, size_t n,
			  struct gs_err *err)
{
	struct gs_store_object got;
	uint32_t hsize;
	int fd;
	int rc = open_object(s, want, &got, &fd, &hsize, path, n, err);
	if (!rc)
		close(fd);
	return rc;
}

int gs_store_read_object(struct gs_store *s, const struct gs_store_object *want, void *buf, struct gs_err *err)
{
	struct gs_store_object got;
	uint32_t hsize;
	int fd;
	char path[PATH_MAX];
	int rc = open_object(s, want, &got, &fd, &hsize, path, sizeof(path), err);
	if (rc)
		return rc;
	void *st = got.codec == GS_CODEC_NONE ? buf : gs_codec_stored_buffer(got.stored_length);
	if (!st) {
		close(fd);
		return gs_image_oom(err, "a compressed store object");
	}
	int r = gs_fault(GS_FI_IMAGE_READ) ? -gs_fault_errno(GS_FI_IMAGE_READ, EIO)
					   : gs_fs_pread_full(fd, st, got.stored_length, hsize);
	close(fd);
	if (r)
		return gs_fail_errno(err, GS_E_IMAGE, -r, "store object '%s' cannot be read", path);
	uint32_t crc = gs_crc32c(0, st, got.stored_length);
	if (crc != got.stored_crc32c)
		return gs_fail(err, GS_E_IMAGE, "store object '%s' is corrupt: checksum of its stored bytes 0x%08" PRIx32
			       ", expected 0x%08" PRIx32, path, crc, got.stored_crc32c);
	if (got.codec != GS_CODEC_NONE) {
		const char *why;
		int d = gs_chunk_decompress(got.codec, got.transform, st, got.stored_length, buf, got.length, &why);
		if (d == -2)
			return gs_image_oom(err, "decompressing a store object");
		if (d)
			return gs_fail(err, GS_E_IMAGE, "store object '%s' does not decompress (%s): %s", path,
				       gs_codec_name(got.codec), why);
		crc = gs_crc32c(0, buf, got.length);
		if (crc != got.crc32c)
			return gs_fail(err, GS_E_IMAGE, "store object '%s' is corrupt: checksum 0x%08" PRIx32 ", expected 0x%08"
				       PRIx32, path, crc, got.crc32c);
	}
	return 0;
}

/* ------------------------------------------------------------------- gc */

enum gs_store_ref_fate gs_store_gc_ref_fate(bool live, bool image_names_store, bool dup, bool leftover)
{
	if (live)
		return GS_REF_KEEP_LIVE;
	if ((image_names_store && !dup) || leftover)
		return GS_REF_KEEP_IMAGE;
	return GS_REF_REMOVE;
}

/* A growing array of names, sorted once filled, for the keep set. */
struct names {
	char **v;
	size_t n, cap;
};

static int names_add(struct names *ns, const char *name)
{
	if (ns->n == ns->cap) {
		size_t cap = ns->cap ? ns->cap * 2 : 64;
		char **v = realloc(ns->v, cap * sizeof(*v));
		if (!v)
			return -1;
		ns->v = v;
		ns->cap = cap;
	}
	if (!(ns->v[ns->n] = strdup(name)))
		return -1;
	ns->n++;
	return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Sorted for names_has; an empty list has no array to give qsort (NULL, which it must not get). */
static void names_sort(struct names *ns)
{
	if (ns->n)
		qsort(ns->v, ns->n, sizeof(*ns->v), cmp_str);
}

static bool names_has(const struct names *ns, const char *name)
{
	return ns->n && bsearch(&name, ns->v, ns->n, sizeof(*ns->v), cmp_str);
}

static void names_free(struct names *ns)
{
	for (size_t i = 0; i < ns->n; i++)
		free(ns->v[i]);
	free(ns->v);
}

/* A ref file read: its last image line, and the objects it lists. */
struct ref_file {
	char name[256];
	char image[PATH_MAX];
	int fd;
	bool live;
};

static int read_ref(struct gs_store *s, struct ref_file *rf, struct names *listed, struct gs_err *err)
{
	FILE *f = fdopen(dup(rf->fd), "r");
	if (!f)
		return gs_fail_errno(err, GS_E_FAILURE, errno, "chunk store '%s': cannot read ref '%s'", s->path, rf->name);
	char line[PATH_MAX + 16];
	int rc = 0;
	while (!rc && fgets(line, sizeof(line), f)) {
		size_t n = strlen(line);
		if (n && line[n - 1] == '\n')
			line[--n] = '\0';
		if (!strncmp(line, "image ", 6))
			snprintf(rf->image, sizeof(rf->image), "%s", line + 6);
		else if (!strncmp(line, "object ", 7) && listed && names_add(listed, line + 7))
			rc = gs_image_oom(err, "gc");
	}
	fclose(f);
	return rc;
}

/* The objects m's STORED chunks name, where m names this store (*names_store then true). */
static int manifest_objects(struct gs_store *s, const struct gs_manifest *m, bool *names_store, struct names *keep,
			    struct gs_err *err)
{
	if (!m->has_store || memcmp(m->store.store_id, s->id, 16))
		return 0;
	*names_store = true;
	for (size_t i = 0; i < m->nchunks; i++) {
		const struct gs_image_chunk *c = &m->chunks[i];
		if (!(c->flags & GS_CHUNK_F_STORED))
			continue;
		char name[GS_STORE_OBJECT_NAME_MAX];
		gs_store_object_name(c->fp_lo, c->fp_hi, c->crc32c, c->length, name);
		if (names_add(keep, name))
			return gs_image_oom(err, "gc");
	}
	return 0;
}

/*
 * The objects of the parts of a process tree's image at dir (fd): each
 * procs/<pid>/ is an image of its own that may name the store
 * (FORMAT.md section 12); *alive: the process of one of them lives. A part
 * that cannot be read stops gc, as the image itself does.
 */
static int tree_part_objects(struct gs_store *s, int fd, const char *dir, bool *names_store, bool *alive,
			     struct names *keep, struct gs_err *err)
{
	int pfd = openat(fd, GS_FMT_TREE_PROCS_NAME, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (pfd < 0)
		return 0; /* a tree's image with no part of its own (every process on the driver path) */
	DIR *d = fdopendir(pfd);
	if (!d) {
		close(pfd);
		return gs_fail_errno(err, GS_E_FAILURE, errno, "cannot read '%s/%s'", dir, GS_FMT_TREE_PROCS_NAME);
	}
	int rc = 0;
	struct dirent *e;
	while (!rc && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char part[PATH_MAX];
		if ((size_t)snprintf(part, sizeof(part), "%s/%s/%s", dir, GS_FMT_TREE_PROCS_NAME, e->d_name) >= sizeof(part)) {
			rc = gs_fail(err, GS_E_FAILURE, "'%s/%s/%s' is too long a path", dir, GS_FMT_TREE_PROCS_NAME, e->d_name);
			break;
		}
		int qfd;
		struct stat st;
		if ((rc = gs_fs_open_dir_checked(part, part, &qfd, &st, err)) < 0) {
			rc = gs_fail_errno(err, GS_E_FAILURE, -rc, "cannot open '%s'", part);
			break;
		}
		if (rc)
			break;
		struct gs_manifest m;
		rc = gs_fs_check_trusted(&st, part, err);
		if (!rc)
			rc = gs_manifest_read_at(qfd, part, &m, err);
		close(qfd);
		if (rc)
			break;
		*alive |= gs_proc_alive(m.info.source_pid);
		rc = manifest_objects(s, &m, names_store, keep, err);
		gs_manifest_free(&m);
	}
	closedir(d);
	return rc;
}

/*
 * The objects image names in this store (a process tree's image: its
 * parts'): *names_store false where there is no image at dir (or it names
 * another store, or none). An image that is there but cannot be read stops
 * gc (what it keeps is unknown).
 */
static int image_objects(struct gs_store *s, const char *dir, bool leftover, bool *names_store, struct names *keep,
			 struct gs_err *err)
{
	*names_store = false;
	int fd;
	struct stat st;
	int rc = gs_fs_open_dir_checked(dir, dir, &fd, &st, err);
	if (rc < 0)
		return -rc == ENOENT || -rc == ENOTDIR ? 0 : gs_fail_errno(err, GS_E_FAILURE, -rc, "cannot open '%s'", dir);
	if (rc)
		return rc;
	if (faccessat(fd, GS_FMT_MANIFEST_NAME, F_OK, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT) {
		close(fd);
		return 0;
	}
	struct gs_manifest m;
	rc = gs_fs_check_trusted(&st, dir, err);
	if (!rc)
		rc = gs_manifest_read_at(fd, dir, &m, err);
	if (rc) {
		close(fd);
		return rc;
	}
	/* a tree's parts into their own list first: whether they are kept depends on the whole */
	struct names parts = { 0 };
	bool parts_name_store = false, part_alive = false;
	if (!strcmp(m.info.how, GS_FMT_HOW_TREE))
		rc = tree_part_objects(s, fd, dir, &parts_name_store, &part_alive, &parts, err);
	/*
	 * What a dump left can bring a process back only where CRIU finished
	 * (its inventory, written last) or the process lives on, suspended
	 * with its GPU data there; else it is of no use, and keeps nothing.
	 */
	struct gs_fs_owner ow;
	bool source_alive = leftover && (gs_fs_owner_read(fd, &ow) ? gs_fs_owner_runs(ow.owner, ow.owner_start)
								     : gs_proc_alive(m.info.source_pid));
	bool useful = !leftover || source_alive || part_alive ||
		      (m.info.cpu_state && faccessat(fd, "cpu/inventory.img", F_OK, AT_SYMLINK_NOFOLLOW) == 0);
	close(fd);
	if (!rc && useful) {
		rc = manifest_objects(s, &m, names_store, keep, err);
		*names_store |= parts_name_store;
		for (size_t i = 0; !rc && i < parts.n; i++)
			if (names_add(keep, parts.v[i]))
				rc = gs_image_oom(err, "gc");
	}
	names_free(&parts);
	gs_manifest_free(&m);
	return rc;
}

/*
 * The objects of what a dump of dir left beside it: its temporary directory
 * (.<base>.tmp-*) where it died with its image complete, or that directory
 * renamed by a later dump of dir (<base>.kept-*). Either may be the only
 * copy of a process (image_tmp.c keeps them, and `gpusnap state` names
 * them), so their objects stay while they are there and of use (CRIU's part
 * complete, or the process alive); *found: one of them names this store. A
 * temporary directory without a manifest is an unfinished image, and one
 * whose flock is held is its writer's (the manifest may be half-written; a
 * live writer's objects are its live ref's): both skipped. One that cannot
 * be read stops gc, as an image at dir does.
 */
static int leftover_objects(struct gs_store *s, const char *dir, bool *found, struct names *keep, struct gs_err *err)
{
	*found = false;
	char parent[PATH_MAX], base[NAME_MAX + 1];
	snprintf(parent, sizeof(parent), "%s", dir);
	char *slash = strrchr(parent, '/');
	if (!slash || !slash[1])
		return 0;
	snprintf(base, sizeof(base), "%s", slash + 1);
	if (slash == parent)
		slash[1] = '\0';
	else
		*slash = '\0';
	DIR *d = opendir(parent);
	if (!d)
		return 0; /* the parent is gone, and with it what the dump left */
	int rc = 0;
	struct dirent *e;
	while (!rc && (e = readdir(d))) {
		enum gs_image_leftover kind = gs_image_leftover_of(base, e->d_name);
		if (kind == GS_LEFTOVER_NONE)
			continue;
		char path[PATH_MAX];
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", strcmp(parent, "/") ? parent : "", e->d_name) >= sizeof(path))
			continue;
		int lock_fd = -1;
		if (kind == GS_LEFTOVER_TMP) {
			lock_fd = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (lock_fd < 0)
				continue;
			if (faccessat(lock_fd, GS_FMT_MANIFEST_NAME, F_OK, AT_SYMLINK_NOFOLLOW) < 0 ||
			    flock(lock_fd, LOCK_SH | LOCK_NB) < 0) {
				close(lock_fd);
				continue;
			}
		}
		bool names_store = false;
		if ((rc = image_objects(s, path, true, &names_store, keep, err)))
			gs_err_wrap(err, "gc of '%s' stopped, nothing removed: '%s', left by a dump of '%s', cannot be read",
				    s->path, path, dir);
		*found |= names_store;
		if (lock_fd >= 0)
			close(lock_fd);
	}
	closedir(d);
	return rc;
}

static int lock_exclusive(struct gs_store *s, double wait_s, struct gs_err *err)
{
	double until = gs_now() + wait_s;
	bool said = false;
	for (;;) {
		if (flock(s->lock_fd, LOCK_EX | LOCK_NB) == 0)
			return 0;
		if (errno != EWOULDBLOCK && errno != EINTR)
			return gs_fail_errno(err, GS_E_FAILURE, errno, "chunk store '%s': cannot lock it", s->path);
		char who[128];
		bool ex = false;
		gs_fs_flock_holder(s->lock_fd, who, sizeof(who), &ex);
		if (gs_now() >= until)
			return gs_fail(err, GS_E_STATE, "chunk store '%s' is locked by %s (%s) for more than %g s; try again",
				       s->path, who, ex ? "another gc" : "a dump writing into it", wait_s);
		if (!said) {
			fprintf(stderr, "gpusnap: chunk store '%s' is locked by %s; waiting up to %g s\n", s->path, who,
				wait_s);
			said = true;
		}
		usleep(20000);
	}
}

/* Removes objects of the directory sub (objects/XX) not in keep; counts into r. */
static int sweep_dir(struct gs_store *s, const char *sub, const struct names *keep, bool dry_run,
		     struct gs_store_gc_result *r, FILE *list, struct gs_err *err)
{
	int fd = openat(s->objects_fd, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return gs_fail_errno(err, GS_E_FAILURE, errno, "chunk store '%s': cannot read '%s/%s'", s->path,
				     GS_STORE_OBJECTS_DIR, sub);
	}
	int rc = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		r->objects++;
		if (names_has(keep, e->d_name))
			continue;
		struct stat st;
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		r->objects_removed++;
		r->bytes_removed += (uint64_t)st.st_size;
		if (list)
			fprintf(list, "object %s\n", e->d_name);
		if (!dry_run && unlinkat(dirfd(d), e->d_name, 0) < 0 && errno != ENOENT) {
			rc = gs_fail_errno(err, GS_E_FAILURE, errno, "chunk store '%s': cannot remove '%s/%s/%s'", s->path,
					   GS_STORE_OBJECTS_DIR, sub, e->d_name);
			break;
		}
	}
	closedir(d);
	if (!rc && !dry_run)
		unlinkat(s->objects_fd, sub, AT_REMOVEDIR); /* only if emptied; the next object there makes it again */
	return rc;
}

/* Lists a directory's entry names (no dot entries unless dots). */
static int list_dir(int dfd, bool dots, struct names *out)
{
	int fd = dup(dfd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	rewinddir(d);
	struct dirent *e;
	int rc = 0;
	while (!rc && (e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && (dots || e->d_name[0] != '.'))
			rc = names_add(out, e->d_name);
	closedir(d);
	names_sort(out);
	return rc;
}

int gs_store_gc(const char *path, bool dry_run, double wait_s, struct gs_store_gc_result *r, FILE *list,
		struct gs_err *err)
{
	memset(r, 0, sizeof(*r));
	struct gs_store *s;
	int rc = gs_store_open(path, false, &s, err);
	if (rc)
		return rc;
	struct names refs = { 0 }, keep = { 0 }, images = { 0 }, dead_stems = { 0 }, tmps = { 0 }, subs = { 0 };
	struct ref_file *rfs = NULL;
	if (s->lock_fd < 0) {
		rc = gs_fail(err, GS_E_IMAGE, "chunk store '%s' has no %s file", path, GS_STORE_LOCK_NAME);
		goto out;
	}
	struct stat st;
	if (fstat(s->dir_fd, &st) == 0 && st.st_uid != geteuid() && geteuid() != 0) {
		rc = gs_fail(err, GS_E_PERMISSION, "chunk store '%s' is not this user's (owner uid %u)", path,
			     (unsigned)st.st_uid);
		goto out;
	}
	if ((rc = lock_exclusive(s, wait_s, err)))
		goto out;
	if (list_dir(s->refs_fd, true, &refs)) {
		rc = gs_fail_errno(err, GS_E_FAILURE, errno, "chunk store '%s': cannot read its refs", path);
		goto out;
	}
	rfs = calloc(refs.n ? refs.n : 1, sizeof(*rfs));
	if (!rfs) {
		rc = gs_image_oom(err, "gc");
		goto out;
	}
	/* first every ref's state, then the images: nothing is removed before all are known */
	enum gs_store_ref_fate *fate = calloc(refs.n ? refs.n : 1, sizeof(*fate));
	if (!fate) {
		rc = gs_image_oom(err, "gc");
		goto out;
	}
	for (size_t i = 0; !rc && i < refs.n; i++) {
		struct ref_file *rf = &rfs[i];
		snprintf(rf->name, sizeof(rf->name), "%s", refs.v[i]);
		rf->fd = openat(s->refs_fd, rf->name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (rf->fd < 0) {
			rc = gs_fail_errno(err, GS_E_FAILURE, errno, "chunk store '%s': cannot open ref '%s'", path, rf->name);
			break;
		}
		struct stat rst;
		if (fstat(rf->fd, &rst) < 0 || !S_ISREG(rst.st_mode) ||
		    (rc = gs_fs_check_entry(&rst, rf->name, err))) {
			if (!rc)
				rc = gs_fail(err, GS_E_IMAGE, "chunk store '%s': ref '%s' is not a file", path, rf->name);
			break;
		}
		rf->live = flock(rf->fd, LOCK_EX | LOCK_NB) < 0;
		rc = read_ref(s, rf, rf->live ? &keep : NULL, err);
		if (rc)
			break;
		bool names_store = false, dup = false, leftover = false;
		if (rf->name[0] != '.' && rf->image[0]) {
			char real[PATH_MAX];
			const char *img = realpath(rf->image, real) ? real : rf->image;
			size_t before = keep.n;
			if ((rc = image_objects(s, img, false, &names_store, &keep, err))) {
				gs_err_wrap(err, "gc of '%s' stopped, nothing removed: the image '%s' its ref '%s' names cannot "
					    "be read", path, rf->image, rf->name);
				break;
			}
			if (!rf->live && (rc = leftover_objects(s, img, &leftover, &keep, err)))
				break;
			if (names_store && !rf->live) {
				names_sort(&images);
				dup = names_has(&images, img);
				if (dup) { /* that image's objects are kept already */
					for (size_t k = before; k < keep.n; k++)
						free(keep.v[k]);
					keep.n = before;
				} else if (names_add(&images, img)) {
					rc = gs_image_oom(err, "gc");
					break;
				}
			}
		}
		fate[i] = gs_store_gc_ref_fate(rf->live, names_store, dup, leftover);
		if (fate[i] != GS_REF_REMOVE)
			r->images += fate[i] == GS_REF_KEEP_IMAGE;
	}
	if (rc) {
		free(fate);
		goto out;
	}
	r->refs = refs.n;
	names_sort(&keep);
	/* dead refs, with their temporary objects */
	for (size_t i = 0; i < refs.n; i++) {
		struct ref_file *rf = &rfs[i];
		const char *stem = rf->name[0] == '.' ? rf->name + 1 : rf->name;
		size_t sl = strlen(stem), xl = strlen(GS_STORE_REF_SUFFIX);
		if (fate[i] != GS_REF_REMOVE)
			continue;
		if (sl > xl && !strcmp(stem + sl - xl, GS_STORE_REF_SUFFIX)) {
			char st2[256];
			snprintf(st2, sizeof(st2), "%.*s", (int)(sl - xl), stem);
			if (names_add(&dead_stems, st2)) {
				rc = gs_image_oom(err, "gc");
				break;
			}
		}
		r->refs_removed++;
		if (list)
			fprintf(list, "ref %s %s\n", rf->name, rf->image[0] ? rf->image : "-");
		if (!dry_run)
			unlinkat(s->refs_fd, rf->name, 0);
	}
	free(fate);
	if (rc)
		goto out;
	names_sort(&dead_stems);
	/* temporary objects: a dead dump's, or one whose ref is gone (a dump makes its ref before any) */
	struct names live_stems = { 0 };
	for (size_t i = 0; i < refs.n; i++) {
		if (!rfs[i].live)
			continue;
		const char *stem = rfs[i].name[0] == '.' ? rfs[i].name + 1 : rfs[i].name;
		char st2[256];
		size_t sl = strlen(stem), xl = strlen(GS_STORE_REF_SUFFIX);
		snprintf(st2, sizeof(st2), "%.*s", (int)(sl > xl ? sl - xl : sl), stem);
		if (names_add(&live_stems, st2)) {
			rc = gs_image_oom(err, "gc");
			break;
		}
	}
	names_sort(&live_stems);
	if (!rc && list_dir(s->tmp_fd, true, &tmps) == 0) {
		for (size_t i = 0; i < tmps.n; i++) {
			char st2[256];
			const char *dot = strrchr(tmps.v[i], '.');
			snprintf(st2, sizeof(st2), "%.*s", dot ? (int)(dot - tmps.v[i]) : (int)strlen(tmps.v[i]), tmps.v[i]);
			if (names_has(&live_stems, st2))
				continue;
			r->temp_removed++;
			if (!dry_run)
				unlinkat(s->tmp_fd, tmps.v[i], 0);
		}
	}
	names_free(&live_stems);
	if (rc)
		goto out;
	/* the objects: whatever no live ref lists and no kept image names */
	if (list_dir(s->objects_fd, false, &subs)) {
		rc = gs_fail_errno(err, GS_E_FAILURE, errno, "chunk store '%s': cannot read '%s'", path, GS_STORE_OBJECTS_DIR);
		goto out;
	}
	for (size_t i = 0; !rc && i < subs.n; i++) {
		struct stat sst;
		/* objects live in objects/XX/; anything else there is not gc's */
		if (fstatat(s->objects_fd, subs.v[i], &sst, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(sst.st_mode))
			rc = sweep_dir(s, subs.v[i], &keep, dry_run, r, list, err);
	}
	if (!rc && !dry_run) {
		fsync(s->objects_fd);
		fsync(s->refs_fd);
	}
out:
	if (rfs) {
		for (size_t i = 0; i < refs.n; i++)
			if (rfs[i].fd > 0)
				close(rfs[i].fd);
		free(rfs);
	}
	names_free(&refs);
	names_free(&keep);
	names_free(&images);
	names_free(&dead_stems);
	names_free(&tmps);
	names_free(&subs);
	gs_store_close(s);
	return rc;
}
