/*
 * cpu_list.c - cpu-files.img: scanning cpu/, building, encoding, decoding
 * and matching the list of CRIU's files, and checksumming one piece of one
 * of them (see cpu_list.h).
 */
#include "image/cpu_list.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fault.h"
#include "common/util.h"
#include "image/crc32c.h"
#include "image/format.h"
#include "image/image_fs.h"

/* ------------------------------------------------------------------ scan */

struct scan_state {
	struct gs_cpu_scan *s;
	size_t *offsets; /* name offsets in s->names, one per file (s->names moves while it grows) */
	size_t cap_files;
};

static int add_file(struct scan_state *st, const char *rel, uint64_t size, struct gs_err *err)
{
	struct gs_cpu_scan *s = st->s;
	size_t len = strlen(rel) + 1;
	if (s->names_len + len > s->names_cap) {
		size_t cap = s->names_cap ? s->names_cap : 4096;
		while (cap < s->names_len + len)
			cap *= 2;
		char *p = realloc(s->names, cap);
		if (!p)
			return gs_fail(err, GS_E_NO_SPACE, "out of memory (names of CPU files)");
		s->names = p;
		s->names_cap = cap;
	}
	if (s->nfiles == st->cap_files) {
		size_t cap = st->cap_files ? st->cap_files * 2 : 64;
		struct gs_cpu_file *f = realloc(s->files, cap * sizeof(*f));
		if (f)
			s->files = f;
		size_t *o = f ? realloc(st->offsets, cap * sizeof(*o)) : NULL;
		if (!f || !o)
			return gs_fail(err, GS_E_NO_SPACE, "out of memory (list of CPU files)");
		st->offsets = o;
		st->cap_files = cap;
	}
	memcpy(s->names + s->names_len, rel, len);
	st->offsets[s->nfiles] = s->names_len;
	s->files[s->nfiles++] = (struct gs_cpu_file){ .name = NULL, .size = size };
	s->names_len += len;
	return 0;
}

static int scan_dir(struct scan_state *st, int dir_fd, const char *rel, const char *path, int depth,
		    struct gs_err *err)
{
	int fd = dup(dir_fd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return gs_fail_errno(err, GS_E_FAILURE, e, "cannot read '%s'", path);
	}
	rewinddir(d); /* the duplicate shares dir_fd's position */
	int rc = 0;
	struct dirent *de;
	while (!rc && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		char sub_rel[4096], sub_path[4200];
		if ((size_t)snprintf(sub_rel, sizeof(sub_rel), "%s%s%s", rel, *rel ? "/" : "", de->d_name) >=
		    sizeof(sub_rel) ||
		    (size_t)snprintf(sub_path, sizeof(sub_path), "%s/%s", path, de->d_name) >= sizeof(sub_path)) {
			rc = gs_fail(err, GS_E_IMAGE, "a path under '%s' is longer than %zu bytes", path, sizeof(sub_rel) - 1);
			break;
		}
		struct stat sb;
		if (fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
			rc = gs_fail_errno(err, GS_E_IMAGE, errno, "cannot stat '%s'", sub_path);
			break;
		}
		if ((rc = gs_fs_check_entry(&sb, sub_path, err)))
			break;
		if (S_ISREG(sb.st_mode)) {
			rc = add_file(st, sub_rel, (uint64_t)sb.st_size, err);
			continue;
		}
		if (depth + 1 >= GS_FS_MAX_DEPTH) {
			rc = gs_fail(err, GS_E_IMAGE, "'%s' is nested deeper than %d levels", sub_path, GS_FS_MAX_DEPTH);
			break;
		}
		int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub < 0) {
			rc = gs_fail_errno(err, errno == EACCES ? GS_E_PERMISSION : GS_E_IMAGE, errno, "cannot open '%s'",
					   sub_path);
			break;
		}
		rc = scan_dir(st, sub, sub_rel, sub_path, depth + 1, err);
		close(sub);
	}
	closedir(d);
	return rc;
}

static int cmp_file(const void *a, const void *b)
{
	return strcmp(((const struct gs_cpu_file *)a)->name, ((const struct gs_cpu_file *)b)->name);
}

int gs_cpu_scan(int cpu_fd, const char *cpu_path, struct gs_cpu_scan *s, struct gs_err *err)
{
	memset(s, 0, sizeof(*s));
	struct scan_state st = { .s = s };
	int rc = scan_dir(&st, cpu_fd, "", cpu_path, 0, err);
	if (!rc) {
		for (size_t i = 0; i < s->nfiles; i++)
			s->files[i].name = s->names + st.offsets[i];
		if (s->nfiles)
			qsort(s->files, s->nfiles, sizeof(*s->files), cmp_file);
	}
	free(st.offsets);
	return rc;
}

void gs_cpu_scan_free(struct gs_cpu_scan *s)
{
	free(s->files);
	free(s->names);
	memset(s, 0, sizeof(*s));
}

/* ------------------------------------------------------------------ build */

int gs_cpu_list_from_scan(const struct gs_cpu_scan *s, const uint8_t image_id[16], uint32_t manifest_crc32c,
			  uint64_t piece, struct gs_cpu_list *l, struct gs_err *err)
{
	memset(l, 0, sizeof(*l));
	memcpy(l->image_id, image_id, 16);
	l->manifest_crc32c = manifest_crc32c;
	size_t n = 0;
	for (size_t i = 0; i < s->nfiles; i++)
		n += s->files[i].size ? (size_t)((s->files[i].size + piece - 1) / piece) : 1;
	l->raw = malloc(s->names_len ? s->names_len : 1);
	l->pieces = calloc(n ? n : 1, sizeof(*l->pieces));
	if (!l->raw || !l->pieces) {
		gs_cpu_list_free(l);
		return gs_fail(err, GS_E_NO_SPACE, "out of memory (list of CPU files)");
	}
	if (s->names_len)
		memcpy(l->raw, s->names, s->names_len);
	for (size_t i = 0; i < s->nfiles; i++) {
		const struct gs_cpu_file *f = &s->files[i];
		const char *name = (const char *)l->raw + (f->name - s->names);
		uint64_t off = 0;
		do {
			uint64_t len = f->size - off < piece ? f->size - off : piece;
			l->pieces[l->npieces++] =
				(struct gs_cpu_piece){ .name = name, .file_size = f->size, .offset = off, .length = len };
			off += len;
		} while (off < f->size);
		l->bytes += f->size;
	}
	l->nfiles = s->nfiles;
	return 0;
}

void gs_cpu_list_free(struct gs_cpu_list *l)
{
	free(l->pieces);
	free(l->raw);
	memset(l, 0, sizeof(*l));
}

/* ----------------------------------------------------------------- encode */

int gs_cpu_list_encode(const struct gs_cpu_list *l, void **bufp, size_t *lenp, struct gs_err *err)
{
	/* each file's name once, in the names area after the records */
	uint64_t names = 0;
	for (size_t i = 0; i < l->npieces; i++)
		if (i == 0 || l->pieces[i].name != l->pieces[i - 1].name)
			names += strlen(l->pieces[i].name) + 1;
	uint64_t records = (uint64_t)l->npieces * sizeof(struct gs_fmt_cpu_piece);
	uint64_t total = sizeof(struct gs_fmt_cpu_list_header) + records + names + sizeof(struct gs_fmt_manifest_trailer);
	if (l->npieces > GS_FMT_CPU_LIST_MAX / sizeof(struct gs_fmt_cpu_piece) || total > GS_FMT_CPU_LIST_MAX)
		return gs_fail(err, GS_E_FAILURE, "the list of CPU files would be larger than the %llu MiB a reader accepts",
			       GS_FMT_CPU_LIST_MAX / GS_MiB);
	unsigned char *buf = calloc(1, total);
	if (!buf)
		return gs_fail(err, GS_E_NO_SPACE, "out of memory for a %" PRIu64 "-byte list of CPU files", total);
	struct gs_fmt_cpu_list_header h = {
		.version = GS_FMT_CPU_LIST_VERSION, .header_size = sizeof(h), .list_size = total,
		.manifest_crc32c = l->manifest_crc32c, .entry_size = sizeof(struct gs_fmt_cpu_piece),
		.piece_count = l->npieces,
	};
	memcpy(h.magic, GS_FMT_CPU_LIST_MAGIC, GS_FMT_MAGIC_LEN);
	memcpy(h.image_id, l->image_id, 16);
	memcpy(buf, &h, sizeof(h));
	uint64_t names_at = sizeof(h) + records, name_off = 0, used = 0;
	for (size_t i = 0; i < l->npieces; i++) {
		const struct gs_cpu_piece *p = &l->pieces[i];
		size_t nlen = strlen(p->name);
		if (i == 0 || p->name != l->pieces[i - 1].name) {
			name_off = used;
			memcpy(buf + names_at + used, p->name, nlen + 1);
			used += nlen + 1;
		}
		struct gs_fmt_cpu_piece r = {
			.name = { .offset = name_off, .length = nlen }, .file_size = p->file_size, .offset = p->offset,
			.length = p->length, .crc32c = p->crc32c,
		};
		memcpy(buf + sizeof(h) + i * sizeof(r), &r, sizeof(r));
	}
	struct gs_fmt_manifest_trailer t = { 0 };
	memcpy(t.magic, GS_FMT_TRAILER_MAGIC, GS_FMT_MAGIC_LEN);
	memcpy(buf + total - sizeof(t), &t, sizeof(t));
	t.crc32c = gs_crc32c(0, buf, total - sizeof(uint32_t));
	memcpy(buf + total - sizeof(t), &t, sizeof(t));
	*bufp = buf;
	*lenp = total;
	return 0;
}

/* ----------------------------------------------------------------- decode */

/* A path under cpu/: relative, '/'-separated components, none empty, "." or "..". */
static bool name_ok(const char *s, size_t len)
{
	if (!len || len > GS_FMT_STRING_MAX || s[0] == '/')
		return false;
	const char *c = s, *end = s + len;
	while (c <= end) {
		const char *slash = memchr(c, '/', (size_t)(end - c));
		const char *e = slash ? slash : end;
		size_t n = (size_t)(e - c);
		if (!n || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
			return false;
		c = e + 1;
	}
	return true;
}

static int decode(unsigned char *buf, size_t len, struct gs_cpu_list *l, struct gs_err *err)
{
	struct gs_fmt_cpu_list_header h;
	struct gs_fmt_manifest_trailer t;
	if (len < sizeof(h) + sizeof(t))
		return gs_fail(err, GS_E_IMAGE, "truncated: %zu bytes", len);
	memcpy(&h, buf, sizeof(h));
	if (memcmp(h.magic, GS_FMT_CPU_LIST_MAGIC, GS_FMT_MAGIC_LEN) != 0)
		return gs_fail(err, GS_E_IMAGE, "bad magic: not a gpusnap list of CPU files");
	if (h.list_size != len)
		return gs_fail(err, GS_E_IMAGE, "%zu bytes, its header says %" PRIu64 " (truncated?)", len, h.list_size);
	memcpy(&t, buf + len - sizeof(t), sizeof(t));
	uint32_t crc = gs_crc32c(0, buf, len - sizeof(uint32_t));
	bool trailer_ok = memcmp(t.magic, GS_FMT_TRAILER_MAGIC, GS_FMT_MAGIC_LEN) == 0;
	if (!trailer_ok || crc != t.crc32c)
		return gs_fail(err, GS_E_IMAGE, "checksum mismatch (0x%08" PRIx32 ", computed 0x%08" PRIx32 "): corrupt",
			       t.crc32c, crc);
	if (h.version != GS_FMT_CPU_LIST_VERSION)
		return gs_fail(err, GS_E_IMAGE, "version %" PRIu32 " (this gpusnap reads version %u)", h.version,
			       GS_FMT_CPU_LIST_VERSION);
	if (h.header_size < sizeof(h) || h.header_size % 8 || h.entry_size < sizeof(struct gs_fmt_cpu_piece) ||
	    h.entry_size % 8 || h.flags)
		return gs_fail(err, GS_E_IMAGE, "unsupported header layout");
	uint64_t body = len - sizeof(t);
	if (h.header_size > body || h.piece_count > (body - h.header_size) / h.entry_size)
		return gs_fail(err, GS_E_IMAGE, "%" PRIu64 " pieces do not fit in %zu bytes", h.piece_count, len);
	uint64_t names_at = h.header_size + h.piece_count * h.entry_size;
	const char *names = (const char *)buf + names_at;
	uint64_t names_len = body - names_at;
	l->pieces = calloc(h.piece_count ? h.piece_count : 1, sizeof(*l->pieces));
	if (!l->pieces)
		return gs_fail(err, GS_E_NO_SPACE, "out of memory for %" PRIu64 " pieces", h.piece_count);
	memcpy(l->image_id, h.image_id, 16);
	l->manifest_crc32c = h.manifest_crc32c;
	const struct gs_cpu_piece *prev = NULL;
	for (uint64_t i = 0; i < h.piece_count; i++) {
		struct gs_fmt_cpu_piece r;
		memcpy(&r, buf + h.header_size + i * h.entry_size, sizeof(r));
		if (r.flags)
			return gs_fail(err, GS_E_IMAGE, "piece %" PRIu64 ": unknown flags 0x%" PRIx32, i, r.flags);
		if (r.name.offset >= names_len || r.name.length >= names_len - r.name.offset ||
		    names[r.name.offset + r.name.length] != '\0' ||
		    memchr(names + r.name.offset, '\0', r.name.length) || !name_ok(names + r.name.offset, r.name.length))
			return gs_fail(err, GS_E_IMAGE, "piece %" PRIu64 ": bad file name", i);
		const char *name = names + r.name.offset;
		bool same_file = prev && !strcmp(prev->name, name);
		if (prev && !same_file && strcmp(prev->name, name) > 0)
			return gs_fail(err, GS_E_IMAGE, "piece %" PRIu64 ": files out of order", i);
		if (prev && !same_file && prev->offset + prev->length != prev->file_size)
			return gs_fail(err, GS_E_IMAGE, "piece %" PRIu64 ": the pieces before it do not cover their file", i);
		uint64_t want = same_file ? prev->offset + prev->length : 0;
		if (same_file && r.file_size != prev->file_size)
			return gs_fail(err, GS_E_IMAGE, "piece %" PRIu64 ": another size for the same file", i);
		if (r.offset != want || r.length > GS_FMT_CHUNK_DATA_MAX || r.length > r.file_size - r.offset ||
		    (!r.length && (r.file_size || same_file)))
			return gs_fail(err, GS_E_IMAGE, "piece %" PRIu64 ": bad range %" PRIu64 "+%" PRIu64 " of %" PRIu64
				       " bytes", i, r.offset, r.length, r.file_size);
		l->pieces[i] = (struct gs_cpu_piece){ .name = name, .file_size = r.file_size, .offset = r.offset,
						      .length = r.length, .crc32c = r.crc32c };
		if (!same_file) {
			l->nfiles++;
			l->bytes += r.file_size;
		}
		prev = &l->pieces[i];
		l->npieces++;
	}
	if (prev && prev->offset + prev->length != prev->file_size)
		return gs_fail(err, GS_E_IMAGE, "the last pieces do not cover their file");
	return 0;
}

int gs_cpu_list_decode(void *buf, size_t len, struct gs_cpu_list *l, struct gs_err *err)
{
	memset(l, 0, sizeof(*l));
	int rc = decode(buf, len, l, err);
	l->raw = buf;
	if (rc)
		gs_cpu_list_free(l);
	return rc;
}

/* ------------------------------------------------------------------ match */

int gs_cpu_list_match(const struct gs_cpu_list *l, const struct gs_cpu_scan *s, const char *image, struct gs_err *err)
{
	size_t i = 0, j = 0;
	while (i < l->npieces || j < s->nfiles) {
		const struct gs_cpu_piece *p = i < l->npieces ? &l->pieces[i] : NULL;
		const struct gs_cpu_file *f = j < s->nfiles ? &s->files[j] : NULL;
		int c = !p ? 1 : !f ? -1 : strcmp(p->name, f->name);
		if (c < 0)
			return gs_fail(err, GS_E_IMAGE, "image '%s': '%s/%s' is missing (the image lists it)", image,
				       GS_FMT_CPU_DIR_NAME, p->name);
		if (c > 0)
			return gs_fail(err, GS_E_IMAGE, "image '%s': '%s/%s' is not one of the image's files (added after "
				       "the dump?)", image, GS_FMT_CPU_DIR_NAME, f->name);
		if (p->file_size != f->size)
			return gs_fail(err, GS_E_IMAGE, "image '%s': '%s/%s' is %" PRIu64 " bytes, the image says %" PRIu64,
				       image, GS_FMT_CPU_DIR_NAME, f->name, f->size, p->file_size);
		while (i < l->npieces && !strcmp(l->pieces[i].name, p->name))
			i++;
		j++;
	}
	return 0;
}

/* ------------------------------------------------------------------ pieces */

/* Opens cpu_fd/name (a '/'-separated path) without following anything, each level checked. */
static int open_listed(int cpu_fd, const char *image, const char *name, int *fd, struct stat *st,
		       struct gs_err *err)
{
	char rel[4096], path[4400];
	snprintf(rel, sizeof(rel), "%s", name);
	int dir = cpu_fd, rc = 0;
	char *c = rel;
	for (char *slash; (slash = strchr(c, '/')); c = slash + 1) {
		*slash = '\0';
		snprintf(path, sizeof(path), "%s/%s/%s", image, GS_FMT_CPU_DIR_NAME, rel);
		int next = openat(dir, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		struct stat ds;
		if (next < 0)
			rc = gs_fail_errno(err, errno == ENOENT ? GS_E_IMAGE : GS_E_PERMISSION, errno, "cannot open '%s'", path);
		else if (fstat(next, &ds) < 0)
			rc = gs_fail_errno(err, GS_E_FAILURE, errno, "cannot stat '%s'", path);
		else
			rc = gs_fs_check_entry(&ds, path, err);
		*slash = '/';
		if (dir != cpu_fd)
			close(dir);
		dir = next;
		if (rc) {
			if (dir >= 0)
				close(dir);
			return rc;
		}
	}
	snprintf(path, sizeof(path), "%s/%s/%s", image, GS_FMT_CPU_DIR_NAME, name);
	rc = gs_fs_open_file(dir, c, path, fd, st, NULL, err);
	if (dir != cpu_fd)
		close(dir);
	return rc;
}

int gs_cpu_piece_crc(int cpu_fd, const char *image, const struct gs_cpu_piece *p, void *buf, size_t buf_size,
		     uint32_t *crc, struct gs_err *err)
{
	int fd;
	struct stat st;
	int rc = open_listed(cpu_fd, image, p->name, &fd, &st, err);
	if (rc)
		return rc;
	if ((uint64_t)st.st_size != p->file_size) {
		close(fd);
		return gs_fail(err, GS_E_IMAGE, "image '%s': '%s/%s' is %lld bytes, the image says %" PRIu64, image,
			       GS_FMT_CPU_DIR_NAME, p->name, (long long)st.st_size, p->file_size);
	}
	uint32_t c = 0;
	for (uint64_t done = 0; done < p->length && !rc;) {
		size_t n = (size_t)(p->length - done < buf_size ? p->length - done : buf_size);
		int e = gs_fault(GS_FI_IMAGE_READ) ? -gs_fault_errno(GS_FI_IMAGE_READ, EIO)
						   : gs_fs_pread_full(fd, buf, n, p->offset + done);
		if (e)
			rc = gs_fail_errno(err, e == -EIO ? GS_E_IMAGE : GS_E_FAILURE, -e,
					   "image '%s': reading '%s/%s' at %" PRIu64 " failed", image, GS_FMT_CPU_DIR_NAME,
					   p->name, p->offset + done);
		else
			c = gs_crc32c(c, buf, n);
		done += n;
	}
	close(fd);
	if (!rc)
		*crc = c;
	return rc;
}
