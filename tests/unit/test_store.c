/*
 * test_store.c - the chunk store (image/store.h, FORMAT.md 4.12): object
 * names and headers encoded and decoded (and refused when damaged), images
 * written into one store sharing their equal chunks, read back through it,
 * refused when an object is missing, damaged or the store is another one;
 * and gc's decisions over refs (live, dead, published, image gone, image of
 * another store), with the live one held by this process's own flock, so
 * nothing depends on timing.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>

#include "common/log.h"
#include "core/fingerprint.h"
#include "image/codec.h"
#include "image/store.h"
#include "image_test_util.h"

#define LEN 8192u

static uint8_t data[3][LEN];

static void test_names_headers(void)
{
	char name[GS_STORE_OBJECT_NAME_MAX];
	gs_store_object_name(0x1122334455667788ULL, 0xa1b2c3d4e5f60718ULL, 0xdeadbeef, 0x2000, name);
	CHECK_STR(name, "a1b2c3d4e5f607181122334455667788-deadbeef-2000");
	char path[128];
	gs_store_object_path(name, path, sizeof(path));
	CHECK_STR(path, "objects/a1/a1b2c3d4e5f607181122334455667788-deadbeef-2000");
	uint64_t lo = 0, hi = 0, len = 0;
	uint32_t crc = 0;
	CHECK(gs_store_object_name_parse(name, &lo, &hi, &crc, &len));
	CHECK(lo == 0x1122334455667788ULL && hi == 0xa1b2c3d4e5f60718ULL && crc == 0xdeadbeef && len == 0x2000);
	const char *bad[] = { "", "a1b2c3d4e5f607181122334455667788-deadbeef-", "a1b2c3d4e5f607181122334455667788-deadbeef-0",
			      "a1b2c3d4e5f607181122334455667788-deadbeef-02000", "A1b2c3d4e5f607181122334455667788-deadbeef-2000",
			      "a1b2c3d4e5f607181122334455667788_deadbeef-2000", "../../etc/passwd",
			      "a1b2c3d4e5f607181122334455667788-deadbeef-2000/x" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECK(!gs_store_object_name_parse(bad[i], &lo, &hi, &crc, &len));

	struct gs_store_object o = { .length = 4096, .stored_length = 4096, .fp_lo = 5, .fp_hi = 6, .crc32c = 0x1234,
				     .stored_crc32c = 0x1234 }, got;
	struct gs_fmt_object_header h;
	gs_store_object_header_build(&h, &o);
	CHECK(!memcmp(h.magic, "GPUSNAPO", 8));
	CHECK_INT(h.version, 1);
	CHECK_INT(h.header_size, 64);
	uint32_t hs = 0;
	const char *why = NULL;
	CHECK_INT(gs_store_object_header_parse(&h, sizeof(h), &got, &hs, &why), 0);
	CHECK_INT(hs, 64);
	CHECK(got.length == o.length && got.stored_length == o.stored_length && got.fp_lo == o.fp_lo &&
	      got.fp_hi == o.fp_hi && got.crc32c == o.crc32c && got.stored_crc32c == o.stored_crc32c &&
	      got.codec == o.codec && got.transform == o.transform);
	CHECK_INT(gs_store_object_header_parse(&h, 63, &got, &hs, &why), -1);
	struct gs_fmt_object_header x = h;
	x.length ^= 1; /* a flipped bit: the header's checksum */
	CHECK_INT(gs_store_object_header_parse(&x, sizeof(x), &got, &hs, &why), -1);
	CHECK_CONTAINS(why, "corrupt");
	x = h;
	x.version = 2;
	x.header_crc32c = gs_crc32c(0, &x, 60);
	CHECK_INT(gs_store_object_header_parse(&x, sizeof(x), &got, &hs, &why), -1);
	CHECK_CONTAINS(why, "unknown store version");
	x = h;
	x.stored_length = 100; /* uncompressed, yet shorter */
	x.header_crc32c = gs_crc32c(0, &x, 60);
	CHECK_INT(gs_store_object_header_parse(&x, sizeof(x), &got, &hs, &why), -1);
	CHECK_CONTAINS(why, "disagree");
	x = h;
	x.fp_lo = x.fp_hi = 0;
	x.header_crc32c = gs_crc32c(0, &x, 60);
	CHECK_INT(gs_store_object_header_parse(&x, sizeof(x), &got, &hs, &why), -1);
	memcpy(x.magic, "GPUSNAPD", 8);
	CHECK_INT(gs_store_object_header_parse(&x, sizeof(x), &got, &hs, &why), -1);
	CHECK_CONTAINS(why, "bad magic");
}

/* The process write_stored's images are of: one that runs or not decides what gc does with a leftover. */
static int32_t stored_source_pid = 77;

/* An image at dir of one allocation of two chunks, data[a] and data[b], written into the store at store_path. */
static int write_stored_codec(const char *store_path, const char *dir, int a, int b, uint8_t codec,
			      struct gs_image_writer_stats *st, struct gs_err *err)
{
	struct gs_store *s;
	int rc = gs_store_open(store_path, true, &s, err);
	if (rc)
		return rc;
	char ref[64];
	if ((rc = gs_store_ref_create(s, dir, ref, sizeof(ref), err))) {
		gs_store_close(s);
		return rc;
	}
	struct gs_image_writer_opts o = { .source_pid = stored_source_pid, .source_comm = "app", .how = "agent", .store = s,
					  .store_rec = "store", .replace = true, .compress_codec = codec };
	struct gs_image_writer *w;
	if ((rc = image_test_writer_open(dir, &o, &w, err))) {
		gs_store_close(s);
		return rc;
	}
	struct gs_image_gpu g = { .index = 0, .name = "g", .total_memory = 1 << 30 };
	struct gs_image_allocation al = { .id = 3, .va = 1 << 20, .size = 2 * LEN };
	if ((rc = gs_image_writer_add_gpu(w, &g, err)) || (rc = gs_image_writer_add_allocation(w, &al, err)) ||
	    (rc = gs_image_write_chunk(w, 3, 0, data[a], LEN, err)) ||
	    (rc = gs_image_write_chunk(w, 3, LEN, data[b], LEN, err))) {
		image_test_writer_abort(w);
		gs_store_close(s);
		return rc;
	}
	if (st)
		gs_image_writer_stats(w, st);
	rc = image_test_writer_commit(w, err);
	gs_store_close(s); /* its ref stays: it names the published image */
	return rc;
}

static int write_stored(const char *store_path, const char *dir, int a, int b, struct gs_image_writer_stats *st,
			struct gs_err *err)
{
	return write_stored_codec(store_path, dir, a, b, GS_CODEC_NONE, st, err);
}

static int objects_in(const char *store)
{
	char p[800];
	snprintf(p, sizeof(p), "%s/objects", store);
	DIR *d = opendir(p);
	int n = 0;
	struct dirent *e;
	while (d && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char q[1100];
		snprintf(q, sizeof(q), "%s/%s", p, e->d_name);
		n += count_matching(q, "-");
	}
	if (d)
		closedir(d);
	return n;
}

static void object_file(const char *store, int k, char *out, size_t n)
{
	char name[GS_STORE_OBJECT_NAME_MAX], rel[128];
	struct gs_fp f = gs_fp_of(data[k], LEN);
	gs_store_object_name(f.lo, f.hi, gs_crc32c(0, data[k], LEN), LEN, name);
	gs_store_object_path(name, rel, sizeof(rel));
	snprintf(out, n, "%s/%s", store, rel);
}

static void test_store_images(void)
{
	struct gs_err err = { 0 };
	char root[700], store[800], i1[800], i2[800];
	snprintf(root, sizeof(root), "%s", scratch_dir("images"));
	snprintf(store, sizeof(store), "%s/store", root);
	snprintf(i1, sizeof(i1), "%s/img1", root);
	snprintf(i2, sizeof(i2), "%s/img2", root);
	struct gs_image_writer_stats st;
	CHECK_INT(write_stored(store, i1, 0, 1, &st, &err), 0);
	CHECK_INT(st.store_chunks, 2);
	CHECK_INT(st.store_new_objects, 2);
	CHECK_INT(st.data_files, 0);
	/* the same first chunk: only the new second one is written */
	CHECK_INT(write_stored(store, i2, 0, 2, &st, &err), 0);
	CHECK_INT(st.store_new_objects, 1);
	CHECK_INT(objects_in(store), 3);
	struct stat sb;
	CHECK_INT(stat(store, &sb), 0);
	CHECK_INT(sb.st_mode & 0777, 0700);

	struct gs_image *img = NULL;
	CHECK_INT(gs_image_open(i2, &img, &err), 0);
	if (!img)
		return;
	CHECK_INT(gs_image_get_info(img)->format_version, 2);
	CHECK_STR(gs_image_store_path(img), store);
	static uint8_t buf[LEN];
	CHECK_INT(gs_image_read_chunk(img, 0, buf, &err), 0);
	CHECK(!memcmp(buf, data[0], LEN));
	CHECK_INT(gs_image_read_chunk(img, 1, buf, &err), 0);
	CHECK(!memcmp(buf, data[2], LEN));
	CHECK(gs_image_chunk_at(img, 0)->flags == GS_CHUNK_F_STORED);
	gs_image_set_verify_fingerprints(img, true);
	CHECK_INT(gs_image_verify(img, 1, &err), 0);
	struct gs_image_totals t;
	gs_image_totals(img, &t);
	CHECK_INT(t.store_chunks, 2);
	CHECK_INT(t.store_bytes, 2 * LEN);
	gs_image_close(img);

	/* a damaged object: its payload, then its header */
	char obj[1100];
	object_file(store, 2, obj, sizeof(obj));
	int fd = open(obj, O_RDWR);
	CHECK(fd >= 0);
	uint8_t byte;
	CHECK_INT(pread(fd, &byte, 1, 64 + 100), 1);
	byte ^= 0x40;
	CHECK_INT(pwrite(fd, &byte, 1, 64 + 100), 1);
	CHECK_INT(gs_image_open(i2, &img, &err), 0); /* the header agrees: found when read */
	gs_err_clear(&err);
	CHECK_INT(gs_image_read_chunk(img, 1, buf, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "chunk 1 (allocation 3, offset 8192)");
	CHECK_CONTAINS(err.msg, obj);
	CHECK_CONTAINS(err.msg, "is corrupt");
	gs_err_clear(&err);
	CHECK_INT(gs_image_verify(img, 1, &err), GS_E_IMAGE);
	gs_image_close(img);
	byte ^= 0x40;
	CHECK_INT(pwrite(fd, &byte, 1, 64 + 100), 1);
	CHECK_INT(pread(fd, &byte, 1, 20), 1);
	byte ^= 1;
	CHECK_INT(pwrite(fd, &byte, 1, 20), 1);
	gs_err_clear(&err);
	CHECK_INT(gs_image_open(i2, &img, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "is damaged");
	close(fd);
	/* a missing object: refused at the open, before any data is used */
	CHECK_INT(unlink(obj), 0);
	gs_err_clear(&err);
	CHECK_INT(gs_image_open(i2, &img, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "image '");
	CHECK_CONTAINS(err.msg, "chunk 1 (allocation 3, offset 8192)");
	CHECK_CONTAINS(err.msg, "is missing");
	CHECK_INT(gs_image_open(i1, &img, &err), 0); /* img1 never used it */
	gs_image_close(img);

	/* another store at the path the image records: refused by its id */
	char moved[800];
	snprintf(moved, sizeof(moved), "%s/store.old", root);
	CHECK_INT(rename(store, moved), 0);
	struct gs_store *s2;
	CHECK_INT(gs_store_open(store, true, &s2, &err), 0);
	gs_store_close(s2);
	gs_err_clear(&err);
	CHECK_INT(gs_image_open(i1, &img, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "another chunk store");
	/* no store there at all */
	gs_fs_remove_tree(AT_FDCWD, store);
	gs_err_clear(&err);
	CHECK_INT(gs_image_open(i1, &img, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "no chunk store at");

	/* a directory that is not a store, an untrusted one */
	char notstore[800];
	snprintf(notstore, sizeof(notstore), "%s/notstore", root);
	mkdir(notstore, 0700);
	char f[900];
	snprintf(f, sizeof(f), "%s/file", notstore);
	FILE *fp = fopen(f, "w");
	if (fp)
		fclose(fp);
	gs_err_clear(&err);
	CHECK_INT(gs_store_open(notstore, true, &s2, &err), GS_E_USAGE);
	CHECK_CONTAINS(err.msg, "is not a gpusnap chunk store");
	chmod(moved, 0777);
	gs_err_clear(&err);
	CHECK_INT(gs_store_open(moved, true, &s2, &err), GS_E_PERMISSION);
}

/* Objects compressed as a data file's chunks are (FORMAT.md 4.12): written so, read back whole. */
static void test_store_compressed(void)
{
	if (gs_codec_unavailable(GS_CODEC_ZSTD)) {
		printf("skip test_store_compressed: %s\n", gs_codec_unavailable(GS_CODEC_ZSTD));
		return;
	}
	struct gs_err err = { 0 };
	char root[700], store[800], img[800];
	snprintf(root, sizeof(root), "%s", scratch_dir("compressed"));
	snprintf(store, sizeof(store), "%s/store", root);
	snprintf(img, sizeof(img), "%s/img", root);
	struct gs_image_writer_stats st;
	CHECK_INT(write_stored_codec(store, img, 0, 1, GS_CODEC_ZSTD, &st, &err), 0);
	CHECK_INT(st.store_new_objects, 2);
	CHECK_INT(st.compressed_chunks, 2);
	CHECK(st.payload_bytes < 2 * LEN);
	char obj[1100];
	object_file(store, 0, obj, sizeof(obj));
	int fd = open(obj, O_RDONLY);
	struct gs_fmt_object_header h;
	CHECK_INT(read(fd, &h, sizeof(h)), sizeof(h));
	close(fd);
	CHECK_INT(h.codec, GS_CODEC_ZSTD);
	CHECK(h.stored_length < h.length);
	struct gs_image *im = NULL;
	CHECK_INT(gs_image_open(img, &im, &err), 0);
	if (!im)
		return;
	static uint8_t buf[LEN];
	CHECK_INT(gs_image_read_chunk(im, 1, buf, &err), 0);
	CHECK(!memcmp(buf, data[1], LEN));
	CHECK_INT(gs_image_verify(im, 2, &err), 0);
	gs_image_close(im);
}

/* An image is incremental or stored, not both, whichever is set first. */
static void test_store_not_with_parent(void)
{
	struct gs_err err = { 0 };
	char root[700], store[800], img[800];
	snprintf(root, sizeof(root), "%s", scratch_dir("noparent"));
	snprintf(store, sizeof(store), "%s/store", root);
	snprintf(img, sizeof(img), "%s/img", root);
	struct gs_store *st;
	CHECK_INT(gs_store_open(store, true, &st, &err), 0);
	if (!st)
		return;
	struct gs_image_parent par = { .path = "p" };
	struct gs_image_writer *w;
	CHECK_INT(image_test_writer_open(img, &(struct gs_image_writer_opts){ .how = "agent", .store = st }, &w, &err), 0);
	CHECK_INT(gs_image_writer_set_parent(w, &par, &err), GS_E_USAGE);
	image_test_writer_abort(w);
	CHECK_INT(image_test_writer_open(img, &(struct gs_image_writer_opts){ .how = "agent", .parent = &par }, &w, &err), 0);
	CHECK_INT(gs_image_writer_set_store(w, st, NULL, &err), GS_E_USAGE);
	CHECK_CONTAINS(err.msg, "not both");
	image_test_writer_abort(w);
	gs_store_close(st);
}

static void test_gc(void)
{
	/* the decision */
	CHECK_INT(gs_store_gc_ref_fate(true, false, false, false), GS_REF_KEEP_LIVE);
	CHECK_INT(gs_store_gc_ref_fate(true, true, true, false), GS_REF_KEEP_LIVE);
	CHECK_INT(gs_store_gc_ref_fate(false, true, false, false), GS_REF_KEEP_IMAGE);
	CHECK_INT(gs_store_gc_ref_fate(false, true, true, false), GS_REF_REMOVE);
	CHECK_INT(gs_store_gc_ref_fate(false, false, false, false), GS_REF_REMOVE);
	CHECK_INT(gs_store_gc_ref_fate(false, false, false, true), GS_REF_KEEP_IMAGE);
	CHECK_INT(gs_store_gc_ref_fate(false, true, true, true), GS_REF_KEEP_IMAGE);

	struct gs_err err = { 0 };
	char root[700], store[800], i1[800], i2[800], gone[800];
	snprintf(root, sizeof(root), "%s", scratch_dir("gc"));
	snprintf(store, sizeof(store), "%s/store", root);
	snprintf(i1, sizeof(i1), "%s/img1", root);
	snprintf(i2, sizeof(i2), "%s/img2", root);
	snprintf(gone, sizeof(gone), "%s/never", root);
	CHECK_INT(write_stored(store, i1, 0, 1, NULL, &err), 0); /* objects 0 1 */
	CHECK_INT(write_stored(store, i2, 0, 2, NULL, &err), 0); /* objects 0 2 */
	/* a dump that runs (its ref locked by this process) holding object 3 no image names yet */
	static uint8_t live_data[LEN];
	memset(live_data, 0x5a, sizeof(live_data));
	struct gs_store *live;
	char ref[64];
	CHECK_INT(gs_store_open(store, true, &live, &err), 0);
	CHECK_INT(gs_store_ref_create(live, gone, ref, sizeof(ref), &err), 0);
	struct gs_fp lf = gs_fp_of(live_data, LEN);
	struct gs_store_object lo = { .length = LEN, .stored_length = LEN, .fp_lo = lf.lo, .fp_hi = lf.hi,
				      .crc32c = gs_crc32c(0, live_data, LEN) };
	lo.stored_crc32c = lo.crc32c;
	bool created = false;
	CHECK_INT(gs_store_put(live, &lo, live_data, &created, &err), 0);
	CHECK(created);
	/* a dead dump: its ref unlocked, an object only it listed, a temporary object of its own */
	struct gs_store *dead;
	static uint8_t dead_data[LEN];
	memset(dead_data, 0x77, sizeof(dead_data));
	CHECK_INT(gs_store_open(store, true, &dead, &err), 0);
	char dref[64];
	CHECK_INT(gs_store_ref_create(dead, gone, dref, sizeof(dref), &err), 0);
	struct gs_fp df = gs_fp_of(dead_data, LEN);
	struct gs_store_object dob = { .length = LEN, .stored_length = LEN, .fp_lo = df.lo, .fp_hi = df.hi,
				       .crc32c = gs_crc32c(0, dead_data, LEN) };
	dob.stored_crc32c = dob.crc32c;
	CHECK_INT(gs_store_put(dead, &dob, dead_data, &created, &err), 0);
	gs_store_close(dead);
	char tmpobj[900];
	snprintf(tmpobj, sizeof(tmpobj), "%s/tmp/%.*s.7", store, (int)(strlen(dref) - 4), dref);
	FILE *tf = fopen(tmpobj, "w");
	CHECK(tf != NULL);
	if (tf)
		fclose(tf);
	CHECK_INT(objects_in(store), 5);

	/* img1 removed: its unique object 1 goes, with the dead dump's; 0 and 2 (img2) and the live one stay */
	CHECK_INT(gs_fs_remove_tree(AT_FDCWD, i1), 0);
	struct gs_store_gc_result r;
	CHECK_INT(gs_store_gc(store, true, 5, &r, NULL, &err), 0); /* dry run */
	CHECK_INT(r.objects, 5);
	CHECK_INT(r.objects_removed, 2);
	CHECK_INT(r.refs, 4);
	CHECK_INT(r.refs_removed, 2); /* img1's, the dead dump's */
	CHECK_INT(r.temp_removed, 1);
	CHECK_INT(objects_in(store), 5);
	CHECK_INT(access(tmpobj, F_OK), 0);
	char listing[4096] = "";
	FILE *lf2 = fmemopen(listing, sizeof(listing) - 1, "w");
	CHECK_INT(gs_store_gc(store, false, 5, &r, lf2, &err), 0);
	fclose(lf2);
	CHECK_INT(r.objects_removed, 2);
	CHECK_INT(objects_in(store), 3);
	CHECK(access(tmpobj, F_OK) != 0);
	char o1[1100];
	object_file(store, 1, o1, sizeof(o1));
	CHECK(access(o1, F_OK) != 0);
	CHECK_CONTAINS(listing, "ref ");
	struct gs_image *img = NULL;
	CHECK_INT(gs_image_open(i2, &img, &err), 0);
	static uint8_t buf[LEN];
	CHECK_INT(gs_image_verify(img, 1, &err), 0);
	gs_image_close(img);
	/* the live dump's object stayed: its ref is locked */
	char lname[GS_STORE_OBJECT_NAME_MAX], lrel[128], lpath[1100];
	gs_store_object_name(lo.fp_lo, lo.fp_hi, lo.crc32c, LEN, lname);
	gs_store_object_path(lname, lrel, sizeof(lrel));
	snprintf(lpath, sizeof(lpath), "%s/%s", store, lrel);
	CHECK_INT(access(lpath, F_OK), 0);
	/* once it died without an image: gone too */
	gs_store_close(live);
	CHECK_INT(gs_store_gc(store, false, 5, &r, NULL, &err), 0);
	CHECK(access(lpath, F_OK) != 0);
	CHECK_INT(objects_in(store), 2);
	CHECK_INT(r.images, 1);
	CHECK_INT(gs_image_open(i2, &img, &err), 0);
	CHECK_INT(gs_image_read_chunk(img, 1, buf, &err), 0);
	CHECK(!memcmp(buf, data[2], LEN));
	gs_image_close(img);

	/* an image that names another store now (rewritten without it): its ref goes, and its objects */
	struct gs_image_writer_opts o = { .source_pid = 77, .source_comm = "app", .how = "agent", .replace = true };
	struct gs_image_writer *w;
	CHECK_INT(image_test_writer_open(i2, &o, &w, &err), 0);
	CHECK_INT(gs_image_writer_add_gpu(w, &(struct gs_image_gpu){ .index = 0, .name = "g" }, &err), 0);
	CHECK_INT(gs_image_writer_add_allocation(w, &(struct gs_image_allocation){ .id = 1, .size = LEN }, &err), 0);
	CHECK_INT(gs_image_write_chunk(w, 1, 0, data[0], LEN, &err), 0);
	CHECK_INT(image_test_writer_commit(w, &err), 0);
	CHECK_INT(gs_store_gc(store, false, 5, &r, NULL, &err), 0);
	CHECK_INT(objects_in(store), 0);
	CHECK_INT(r.refs_removed, 1);

	/* an image a ref names that cannot be read: gc stops, nothing removed */
	CHECK_INT(write_stored(store, i1, 0, 1, NULL, &err), 0);
	char man[900];
	snprintf(man, sizeof(man), "%s/manifest.img", i1);
	int fd = open(man, O_RDWR);
	CHECK_INT(pwrite(fd, "X", 1, 0), 1);
	close(fd);
	CHECK_INT(gs_fs_remove_tree(AT_FDCWD, i2), 0);
	gs_err_clear(&err);
	CHECK_INT(gs_store_gc(store, false, 5, &r, NULL, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "nothing removed");
	CHECK_INT(objects_in(store), 2);

	/* another gc holding the lock: waited for, then GS_E_STATE */
	char lockp[900];
	snprintf(lockp, sizeof(lockp), "%s/lock", store);
	int lfd = open(lockp, O_RDONLY);
	CHECK_INT(flock(lfd, LOCK_EX), 0);
	gs_err_clear(&err);
	CHECK_INT(gs_store_gc(store, false, 0.05, &r, NULL, &err), GS_E_STATE);
	CHECK_CONTAINS(err.msg, "is locked by");
	close(lfd);
	/* not a store */
	gs_err_clear(&err);
	CHECK_INT(gs_store_gc(root, false, 1, &r, NULL, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "is not a gpusnap chunk store");
}

/*
 * What a dump that died left beside its DIR: its temporary directory with a
 * complete image, then that directory kept under <DIR>.kept-*: the objects
 * stay while either is there and of use (it may be a process's only copy),
 * and go once it is removed, or where its process is gone and CRIU's part
 * is missing. A temporary directory without a manifest, or one its
 * writer still holds, keeps nothing.
 */
static void test_gc_leftovers(void)
{
	CHECK_INT(gs_image_leftover_of("img", ".img.tmp-12-abc"), GS_LEFTOVER_TMP);
	CHECK_INT(gs_image_leftover_of("img", "img.kept-12-20261129T000000Z"), GS_LEFTOVER_KEPT);
	CHECK_INT(gs_image_leftover_of("img", "img2.kept-12-x"), GS_LEFTOVER_NONE);
	CHECK_INT(gs_image_leftover_of("img", ".img2.tmp-12-x"), GS_LEFTOVER_NONE);
	CHECK_INT(gs_image_leftover_of("img", "img"), GS_LEFTOVER_NONE);

	struct gs_err err = { 0 };
	struct gs_store_gc_result r;
	char root[700], store[800], dir[800], tmp[800], kept[800], unfinished[800];
	snprintf(root, sizeof(root), "%s", scratch_dir("gc-leftovers"));
	snprintf(store, sizeof(store), "%s/store", root);
	snprintf(dir, sizeof(dir), "%s/img", root);
	snprintf(tmp, sizeof(tmp), "%s/.img.tmp-2147483646-abcdef", root);
	snprintf(kept, sizeof(kept), "%s/img.kept-2147483646-20261129T000000Z", root);
	snprintf(unfinished, sizeof(unfinished), "%s/.img.tmp-2147483645-000000", root);
	/* the image as the dead dump left it: complete, its ref naming DIR, which it never reached; of a process
	   that runs (suspended, its GPU data only there) */
	stored_source_pid = (int32_t)getpid();
	CHECK_INT(write_stored(store, dir, 1, 2, NULL, &err), 0);
	CHECK_INT(rename(dir, tmp), 0);
	CHECK_INT(mkdir(unfinished, 0700), 0);
	CHECK_INT(objects_in(store), 2);
	CHECK_INT(gs_store_gc(store, false, 5, &r, NULL, &err), 0);
	CHECK_INT(r.objects_removed, 0);
	CHECK_INT(r.refs_removed, 0);
	CHECK_INT(r.images, 1);
	CHECK_INT(objects_in(store), 2);
	/* its writer holding it (the manifest may be half-written): gc skips it, and the ref goes */
	int hold = open(tmp, O_RDONLY | O_DIRECTORY);
	CHECK_INT(flock(hold, LOCK_EX), 0);
	CHECK_INT(gs_store_gc(store, true, 5, &r, NULL, &err), 0); /* dry run */
	CHECK_INT(r.refs_removed, 1);
	CHECK_INT(r.objects_removed, 2);
	close(hold);
	/* renamed by a later dump of DIR (image_tmp.c's keep_dir): still kept */
	CHECK_INT(rename(tmp, kept), 0);
	CHECK_INT(gs_store_gc(store, false, 5, &r, NULL, &err), 0);
	CHECK_INT(r.objects_removed, 0);
	CHECK_INT(objects_in(store), 2);
	struct gs_image *img = NULL;
	CHECK_INT(gs_image_open(kept, &img, &err), 0);
	CHECK_INT(gs_image_verify(img, 1, &err), 0);
	gs_image_close(img);
	/* of a process that is gone, and without CPU state: of no use, so it keeps nothing (dry run) */
	CHECK_INT(gs_fs_remove_tree(AT_FDCWD, kept), 0);
	stored_source_pid = INT32_MAX; /* above any pid_max */
	CHECK_INT(write_stored(store, dir, 1, 2, NULL, &err), 0);
	stored_source_pid = 77;
	CHECK_INT(rename(dir, kept), 0);
	CHECK_INT(gs_store_gc(store, true, 5, &r, NULL, &err), 0);
	CHECK_INT(r.objects_removed, 2);
	/*
	 * unless its owner record (image_fs.h, written by the dump that made it)
	 * says the process runs: the manifest's PID is the agent's own, another
	 * namespace's for a process in a container; and not where it names one
	 * that is gone
	 */
	int kfd = open(kept, O_RDONLY | O_DIRECTORY);
	CHECK(kfd >= 0);
	CHECK_INT(gs_fs_owner_write(kfd, getpid()), 0);
	CHECK_INT(gs_store_gc(store, true, 5, &r, NULL, &err), 0);
	CHECK_INT(r.objects_removed, 0);
	CHECK_INT(unlinkat(kfd, GS_FS_OWNER_NAME, 0), 0);
	CHECK_INT(gs_fs_owner_write(kfd, test_dead_pid()), 0);
	CHECK_INT(gs_store_gc(store, true, 5, &r, NULL, &err), 0);
	CHECK_INT(r.objects_removed, 2);
	close(kfd);
	/* removed by its user: its objects go, and both refs that named DIR */
	CHECK_INT(gs_fs_remove_tree(AT_FDCWD, kept), 0);
	CHECK_INT(gs_store_gc(store, false, 5, &r, NULL, &err), 0);
	CHECK_INT(r.objects_removed, 2);
	CHECK_INT(r.refs_removed, 2);
	CHECK_INT(objects_in(store), 0);
}

int main(void)
{
	gs_log_init_from_env();
	for (size_t i = 0; i < LEN; i++) {
		data[0][i] = (uint8_t)(i * 7 + 1);
		data[1][i] = (uint8_t)(i * 13 + 5);
		data[2][i] = (uint8_t)(i * 29 + 3);
	}
	scratch_init("store");
	RUN(test_names_headers);
	RUN(test_store_images);
	RUN(test_store_compressed);
	RUN(test_store_not_with_parent);
	RUN(test_gc);
	RUN(test_gc_leftovers);
	scratch_cleanup();
	return TEST_SUMMARY();
}
