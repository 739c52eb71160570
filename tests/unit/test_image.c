/*
 * test_image.c - the GPU image on CPU only: round trips (O_DIRECT and
 * buffered, several data files, concurrent writers), the commit protocol
 * (atomic replacement, abort, kill at each step, disk full), and every
 * corruption and hostile input the reader must refuse.
 */
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "common/fault.h"
#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "image/manifest.h"
#include "image_test_util.h"

static const struct gs_image_writer_opts agent_opts = {
	.source_pid = 4242,
	.source_comm = "python3",
	.how = "agent",
	.max_data_file_size = 128 * 1024, /* several data files even for this small image */
};

/* Writes the standard image at <scratch>/name/img, whose path goes to path. */
static void std_image(const char *name, uint32_t seed, char *path, size_t n)
{
	const char *dir = scratch_dir(name);
	path_join(path, n, dir, "img");
	struct gs_err err = { 0 };
	int rc = write_std_image(path, &agent_opts, seed, &err);
	CHECK_INT(rc, 0);
	if (rc)
		fprintf(stderr, "  write: %s\n", err.msg);
}

static void file_in(char *out, size_t n, const char *dir, const char *name)
{
	path_join(out, n, dir, name);
}

/* ------------------------------------------------------------ round trip */

static void test_roundtrip(void)
{
	const char *dir = scratch_dir("roundtrip");
	char path[800];
	path_join(path, sizeof(path), dir, "img");
	struct gs_err err = { 0 };
	struct gs_image_writer *w;
	CHECK_INT(image_test_writer_open(path, &agent_opts, &w, &err), 0);
	CHECK_INT(std_describe(w, &err), 0);
	CHECK_INT(std_write_chunks(w, 1, &err), 0);
	struct gs_image_writer_stats st;
	gs_image_writer_stats(w, &st);
	CHECK_INT(st.chunks, std_chunk_count());
	CHECK_INT(st.zero_chunks, 8);
	CHECK_INT(st.zero_bytes, 262144 + 200000);
	CHECK_INT(st.payload_bytes, 1 + 3 * 65536 + 1000);
	CHECK(st.data_files >= 2);
	printf("     payload written with O_DIRECT: %llu of %llu bytes\n", (unsigned long long)st.direct_bytes,
	       (unsigned long long)st.payload_bytes);
	CHECK_INT(image_test_writer_commit(w, &err), 0);
	CHECK_INT(check_std_image(path, 1), 0);

	struct gs_image *img;
	CHECK_INT(gs_image_open(path, &img, &err), 0);
	const struct gs_image_info *in = gs_image_get_info(img);
	CHECK_INT(in->format_version, 1); /* nothing compressed: the lowest version */
	CHECK_STR(in->gpusnap_version, GPUSNAP_VERSION);
	CHECK_STR(in->how, "agent");
	CHECK_STR(in->source_comm, "python3");
	CHECK_INT(in->source_pid, 4242);
	CHECK(!in->cpu_state);
	CHECK_INT(in->checksum_algo, GS_CSUM_CRC32C);
	CHECK(in->created_ns > 1600000000LL * 1000000000LL);
	char host[256] = "";
	gethostname(host, sizeof(host) - 1);
	CHECK_STR(in->hostname, host);
	CHECK_INT(gs_image_gpu_at(img, 0)->index, 0);
	CHECK_INT(gs_image_gpu_at(img, 1)->index, 1);
	CHECK_STR(gs_image_gpu_at(img, 0)->name, "NVIDIA H100 80GB HBM3");
	CHECK_INT(gs_image_gpu_at(img, 1)->uuid[0], 0xb0);
	CHECK_INT(gs_image_find_allocation(img, 3), 2);
	CHECK_INT(gs_image_find_allocation(img, 99), -1);
	CHECK(gs_image_data_file_count(img) >= 2);
	CHECK_STR(gs_image_data_file_at(img, 0)->name, "gpu-data-0000.img");
	char cpu[900];
	CHECK_INT(gs_image_cpu_dir(img, cpu, sizeof(cpu), &err), GS_E_IMAGE);
	gs_image_close(img);

	/* Secret data: directory 0700, files 0600, nothing else next to it. */
	struct stat sb;
	CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0700);
	char f[900];
	file_in(f, sizeof(f), path, "manifest.img");
	CHECK(stat(f, &sb) == 0 && (sb.st_mode & 0777) == 0600);
	file_in(f, sizeof(f), path, "gpu-data-0001.img");
	CHECK(stat(f, &sb) == 0 && (sb.st_mode & 0777) == 0600 && sb.st_size % 4096 == 0);
	CHECK_INT(count_entries(dir), 1);
}

static void test_roundtrip_buffered_and_tmpfs(void)
{
	/* Page-cache writes only, and (where /dev/shm exists) tmpfs, which may refuse O_DIRECT. */
	struct gs_image_writer_opts o = agent_opts;
	o.no_direct_io = true;
	o.max_data_file_size = 0;
	const char *dir = scratch_dir("buffered");
	char path[800];
	path_join(path, sizeof(path), dir, "img");
	struct gs_err err = { 0 };
	CHECK_INT(write_std_image(path, &o, 2, &err), 0);
	CHECK_INT(check_std_image(path, 2), 0);
	struct gs_image *img;
	CHECK_INT(gs_image_open(path, &img, &err), 0);
	CHECK_INT(gs_image_data_file_count(img), 1);
	gs_image_close(img);

	char shm[64] = "/dev/shm/gpusnap-test-XXXXXX";
	if (!mkdtemp(shm)) {
		printf("     note: no /dev/shm here; tmpfs round trip not run\n");
		return;
	}
	path_join(path, sizeof(path), shm, "img");
	CHECK_INT(write_std_image(path, &agent_opts, 3, &err), 0);
	CHECK_INT(check_std_image(path, 3), 0);
	CHECK_INT(gs_image_open(path, &img, &err), 0);
	gs_image_set_direct_io(img, false);
	CHECK_INT(gs_image_verify(img, 2, &err), 0);
	gs_image_close(img);
	gs_fs_remove_tree(AT_FDCWD, shm);
}

static void test_unaligned_buffers(void)
{
	const char *dir = scratch_dir("unaligned");
	char path[800];
	path_join(path, sizeof(path), dir, "img");
	struct gs_err err = { 0 };
	struct gs_image_writer *w;
	CHECK_INT(image_test_writer_open(path, NULL, &w, &err), 0);
	struct gs_image_gpu g = { .index = 0, .name = "gpu" };
	CHECK_INT(gs_image_writer_add_gpu(w, &g, &err), 0);
	struct gs_image_allocation a = { .id = 7, .va = 0x1000, .size = 3 * 8192 + 5 };
	CHECK_INT(gs_image_writer_add_allocation(w, &a, &err), 0);
	uint8_t *raw = malloc(a.size + 1), *buf = raw + 1; /* never 4096-aligned */
	fill_pattern(buf, 9, 7, 0, a.size);
	CHECK_INT(gs_image_write_chunk(w, 7, 0, buf, 8192, &err), 0);
	CHECK_INT(gs_image_write_chunk_crc(w, 7, 8192, buf + 8192, 8192, gs_crc32c(0, buf + 8192, 8192), &err), 0);
	CHECK_INT(gs_image_write_chunk(w, 7, 16384, buf + 16384, 8197, &err), 0);
	CHECK_INT(image_test_writer_commit(w, &err), 0);

	struct gs_image *img;
	CHECK_INT(gs_image_open(path, &img, &err), 0);
	uint8_t *out = malloc(a.size + 1);
	for (size_t i = 0; i < gs_image_chunk_count(img); i++) {
		const struct gs_image_chunk *c = gs_image_chunk_at(img, i);
		CHECK_INT(gs_image_read_chunk(img, i, out + 1, &err), 0);
		CHECK(!memcmp(out + 1, buf + c->offset, c->length));
	}
	gs_image_close(img);
	free(raw);
	free(out);
}

/* ------------------------------------------------------------ concurrency */

#define CW_THREADS 4
#define CW_ALLOCS 8
#define CW_CHUNKS 16
#define CW_CHUNK 65536

struct cw_arg {
	struct gs_image_writer *w;
	int thread;
	int rc;
};

static void *cw_thread(void *p)
{
	struct cw_arg *arg = p;
	struct gs_err err = { 0 };
	void *buf;
	if (posix_memalign(&buf, 4096, CW_CHUNK)) {
		arg->rc = -1;
		return NULL;
	}
	/* Thread t writes chunk c of every allocation where c % threads == t: all threads touch all allocations. */
	for (int c = arg->thread; c < CW_CHUNKS && !arg->rc; c += CW_THREADS)
		for (int a = 0; a < CW_ALLOCS && !arg->rc; a++) {
			uint64_t off = (uint64_t)c * CW_CHUNK;
			fill_pattern(buf, 77, (uint64_t)a + 100, off, CW_CHUNK);
			arg->rc = gs_image_write_chunk(arg->w, (uint64_t)a + 100, off, buf, CW_CHUNK, &err);
		}
	if (arg->rc)
		fprintf(stderr, "  thread %d: %s\n", arg->thread, err.msg);
	free(buf);
	return NULL;
}

/*
 * CW_THREADS threads write all chunks of CW_ALLOCS allocations into an image at
 * <scratch>/name/img with opts o, every one read back and verified; returns
 * the image's number of data files (-1 if it could not be opened).
 */
static int concurrent_image(const char *name, const struct gs_image_writer_opts *o)
{
	const char *dir = scratch_dir(name);
	char path[800];
	path_join(path, sizeof(path), dir, "img");
	struct gs_err err = { 0 };
	struct gs_image_writer *w;
	CHECK_INT(image_test_writer_open(path, o, &w, &err), 0);
	struct gs_image_gpu g = { .index = 0, .name = "gpu" };
	CHECK_INT(gs_image_writer_add_gpu(w, &g, &err), 0);
	for (int a = 0; a < CW_ALLOCS; a++) {
		struct gs_image_allocation al = { .id = (uint64_t)a + 100, .va = 0x10000000ULL * (a + 1),
						  .size = (uint64_t)CW_CHUNKS * CW_CHUNK, .kind = GS_ALLOC_KIND_DEVICE };
		CHECK_INT(gs_image_writer_add_allocation(w, &al, &err), 0);
	}
	pthread_t th[CW_THREADS];
	struct cw_arg args[CW_THREADS];
	for (int t = 0; t < CW_THREADS; t++) {
		args[t] = (struct cw_arg){ .w = w, .thread = t };
		pthread_create(&th[t], NULL, cw_thread, &args[t]);
	}
	for (int t = 0; t < CW_THREADS; t++) {
		pthread_join(th[t], NULL);
		CHECK_INT(args[t].rc, 0);
	}
	CHECK_INT(image_test_writer_commit(w, &err), 0);

	struct gs_image *img;
	int rc = gs_image_open(path, &img, &err);
	CHECK_INT(rc, 0);
	if (rc)
		return -1;
	CHECK_INT(gs_image_chunk_count(img), CW_ALLOCS * CW_CHUNKS);
	uint8_t *buf = malloc(CW_CHUNK), *expect = malloc(CW_CHUNK);
	int bad = 0;
	for (size_t i = 0; i < gs_image_chunk_count(img); i++) {
		const struct gs_image_chunk *c = gs_image_chunk_at(img, i);
		fill_pattern(expect, 77, c->alloc_id, c->offset, CW_CHUNK);
		if (gs_image_read_chunk(img, i, buf, &err) || memcmp(buf, expect, CW_CHUNK))
			bad++;
	}
	CHECK_INT(bad, 0);
	CHECK_INT(gs_image_verify(img, 4, &err), 0);
	int files = (int)gs_image_data_file_count(img);
	gs_image_close(img);
	free(buf);
	free(expect);
	return files;
}

static void test_concurrent_writes(void)
{
	struct gs_image_writer_opts o = agent_opts;
	o.max_data_file_size = 1 << 20; /* rotation under contention too */
	CHECK(concurrent_image("concurrent", &o) >= 8);
}

/* Buffered writes spread over parallel_data_files files (one inode lock each); O_DIRECT ones keep to one. */
static void test_concurrent_writes_spread(void)
{
	struct gs_image_writer_opts o = agent_opts;
	o.max_data_file_size = 0;
	o.no_direct_io = true;
	o.parallel_data_files = CW_THREADS;
	CHECK_INT(concurrent_image("spread", &o), CW_THREADS);
	o.parallel_data_files = 1; /* as before: one file at a time */
	CHECK_INT(concurrent_image("spread-one", &o), 1);
	/* Rotation of a full file while the others take payloads: 8 MiB of payloads in files of at most 1 MiB. */
	o.parallel_data_files = CW_THREADS;
	o.max_data_file_size = 1 << 20;
	CHECK(concurrent_image("spread-rotate", &o) >= 8);
	/* More files allowed than payloads written: one per payload, none empty. */
	o.max_data_file_size = 0;
	o.parallel_data_files = CW_ALLOCS * CW_CHUNKS * 2;
	CHECK_INT(concurrent_image("spread-many", &o), CW_ALLOCS * CW_CHUNKS);
}

/* -------------------------------------------------------------- writer use */

static void test_writer_refuses_misuse(void)
{
	struct gs_err err = { 0 };
	struct gs_image_writer *w;
	const char *dir = scratch_dir("misuse");
	char path[800], f[900];

	/* DIR that is not an image and not empty: never replaced. */
	path_join(path, sizeof(path), dir, "home");
	mkdir(path, 0700);
	file_in(f, sizeof(f), path, "precious.txt");
	spit(f, "x", 1);
	CHECK_INT(image_test_writer_open(path, NULL, &w, &err), GS_E_USAGE);
	CHECK_CONTAINS(err.msg, "is not a gpusnap image; refusing to replace it");
	CHECK(access(f, F_OK) == 0);
	/* A regular file, a symlink, a missing parent, "..". */
	CHECK_INT(image_test_writer_open(f, NULL, &w, &err), GS_E_USAGE);
	path_join(path, sizeof(path), dir, "link");
	CHECK_INT(symlink("home", path), 0);
	CHECK_INT(image_test_writer_open(path, NULL, &w, &err), GS_E_USAGE);
	CHECK_CONTAINS(err.msg, "symbolic link");
	path_join(path, sizeof(path), dir, "no/such/img");
	CHECK_INT(image_test_writer_open(path, NULL, &w, &err), GS_E_USAGE);
	CHECK_CONTAINS(err.msg, "no/such");
	CHECK_INT(image_test_writer_open("..", NULL, &w, &err), GS_E_USAGE);

	/* An empty directory may be replaced; trailing slashes are fine. */
	path_join(path, sizeof(path), dir, "empty/");
	mkdir(path, 0700);
	CHECK_INT(image_test_writer_open(path, NULL, &w, &err), 0);
	struct gs_image_gpu g = { .index = 0, .name = "gpu" };
	CHECK_INT(gs_image_writer_add_gpu(w, &g, &err), 0);
	CHECK_INT(gs_image_writer_add_gpu(w, &g, &err), GS_E_FAILURE);
	struct gs_image_allocation a = { .id = 1, .size = 8192 };
	CHECK_INT(gs_image_writer_add_allocation(w, &a, &err), 0);
	CHECK_INT(gs_image_writer_add_allocation(w, &a, &err), GS_E_FAILURE);
	CHECK_CONTAINS(err.msg, "added twice");
	a.id = 2;
	a.blob_len = GS_FMT_BLOB_MAX + 1;
	a.blob = &a;
	CHECK_INT(gs_image_writer_add_allocation(w, &a, &err), GS_E_FAILURE);
	a.blob_len = 0;
	a.flags = 0x80;
	CHECK_INT(gs_image_writer_add_allocation(w, &a, &err), GS_E_FAILURE);
	uint8_t data[4096];
	fill_pattern(data, 1, 1, 0, sizeof(data));
	CHECK_INT(gs_image_write_chunk(w, 9, 0, data, 4096, &err), GS_E_FAILURE);
	CHECK_CONTAINS(err.msg, "allocation 9, which was not added");
	CHECK_INT(gs_image_write_chunk(w, 1, 6000, data, 4096, &err), GS_E_FAILURE);
	CHECK_CONTAINS(err.msg, "outside its 8192 bytes");
	CHECK_INT(gs_image_write_chunk(w, 1, 0, data, 0, &err), GS_E_FAILURE);
	CHECK_INT(gs_image_writer_set_metadata(w, "", "x", &err), GS_E_FAILURE);
	/* Misuse is not a write failure: the writer goes on. Then overlapping chunks fail the commit. */
	CHECK_INT(gs_image_write_chunk(w, 1, 0, data, 4096, &err), 0);
	CHECK_INT(gs_image_write_chunk(w, 1, 2048, data, 4096, &err), 0);
	CHECK_INT(gs_image_write_chunk(w, 1, 4096, data, 4096, &err), 0);
	CHECK_INT(image_test_writer_commit(w, &err), GS_E_FAILURE);
	CHECK_CONTAINS(err.msg, "overlaps the previous chunk");
	CHECK_INT(count_entries(path), 0); /* still the empty directory */
	CHECK_INT(count_matching(dir, ".tmp-"), 0);
}

static void test_incomplete_image_not_committed(void)
{
	const char *dir = scratch_dir("incomplete");
	char path[800];
	path_join(path, sizeof(path), dir, "img");
	struct gs_err err = { 0 };
	struct gs_image_writer *w;
	CHECK_INT(image_test_writer_open(path, NULL, &w, &err), 0);
	struct gs_image_gpu g = { .index = 0, .name = "gpu" };
	gs_image_writer_add_gpu(w, &g, &err);
	struct gs_image_allocation a = { .id = 5, .size = 3 * 4096 };
	gs_image_writer_add_allocation(w, &a, &err);
	uint8_t data[4096];
	fill_pattern(data, 1, 5, 0, sizeof(data));
	CHECK_INT(gs_image_write_chunk(w, 5, 0, data, 4096, &err), 0);
	CHECK_INT(gs_image_write_chunk(w, 5, 8192, data, 4096, &err), 0);
	CHECK_INT(image_test_writer_commit(w, &err), GS_E_FAILURE);
	CHECK_CONTAINS(err.msg, "allocation 5: bytes 4096..8192 have no chunk");
	CHECK_INT(count_entries(dir), 0);

	/* An allocation on a GPU that was never added. */
	CHECK_INT(image_test_writer_open(path, NULL, &w, &err), 0);
	a.gpu_index = 3;
	a.flags = GS_ALLOC_F_NO_DATA;
	gs_image_writer_add_allocation(w, &a, &err);
	CHECK_INT(image_test_writer_commit(w, &err), GS_E_FAILURE);
	CHECK_CONTAINS(err.msg, "on gpu 3, which the image does not list");
	CHECK_INT(count_entries(dir), 0);
}

static void test_cpu_dir(void)
{
	const char *dir = scratch_dir("cpu");
	char path[800], cpu[900], cpu2[900], f[1000];
	path_join(path, sizeof(path), dir, "img");
	struct gs_err err = { 0 };
	struct gs_image_writer *w;
	CHECK_INT(image_test_writer_open(path, &agent_opts, &w, &err), 0);
	CHECK_INT(gs_image_writer_cpu_dir(w, cpu, sizeof(cpu), &err), 0);
	CHECK_INT(gs_image_writer_cpu_dir(w, cpu2, sizeof(cpu2), &err), 0);
	CHECK_STR(cpu, cpu2);
	CHECK(strncmp(cpu, gs_image_writer_tmp_path(w), strlen(gs_image_writer_tmp_path(w))) == 0);
	CHECK_CONTAINS(cpu, "/.img.tmp-");
	CHECK_INT(gs_image_writer_cpu_dir(w, cpu2, 10, &err), GS_E_FAILURE);
	struct stat sb;
	CHECK(stat(cpu, &sb) == 0 && S_ISDIR(sb.st_mode) && (sb.st_mode & 0777) == 0700);
	file_in(f, sizeof(f), cpu, "pages-1.img"); /* what CRIU would write */
	spit(f, "criu", 4);
	CHECK_INT(std_describe(w, &err), 0);
	CHECK_INT(std_write_chunks(w, 4, &err), 0);
	CHECK_INT(image_test_writer_commit(w, &err), 0);

	struct gs_image *img;
	CHECK_INT(gs_image_open(path, &img, &err), 0);
	CHECK(gs_image_get_info(img)->cpu_state);
	CHECK_INT(gs_image_cpu_dir(img, cpu, sizeof(cpu), &err), 0);
	file_in(f, sizeof(f), cpu, "pages-1.img");
	CHECK(access(f, R_OK) == 0);
	gs_image_close(img);

	/* CRIU's files are trusted like ours: a group-writable one is refused; a missing cpu/ too. */
	chmod(f, 0660);
	CHECK_INT(gs_image_open(path, &img, &err), GS_E_PERMISSION);
	CHECK_CONTAINS(err.msg, "pages-1.img");
	chmod(f, 0600);
	CHECK_INT(gs_image_open(path, &img, &err), 0);
	gs_image_close(img);
	gs_fs_remove_tree(AT_FDCWD, cpu);
	CHECK_INT(gs_image_open(path, &img, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "holds CPU state");
}

/* -------------------------------------------------------- commit protocol */

static void test_replace_atomically(void)
{
	char path[800];
	std_image("replace", 10, path, sizeof(path));
	char parent[800];
	snprintf(parent, sizeof(parent), "%s", path);
	*strrchr(parent, '/') = '\0';
	struct gs_err err = { 0 };

	/* A second dump in progress: DIR is still the old image, whole. */
	struct gs_image_writer *w;
	CHECK_INT(image_test_writer_open(path, &agent_opts, &w, &err), 0);
	CHECK_INT(std_describe(w, &err), 0);
	CHECK_INT(std_write_chunks(w, 11, &err), 0);
	CHECK_INT(check_std_image(path, 10), 0);
	CHECK_INT(count_matching(parent, ".img.tmp-"), 1);
	image_test_writer_abort(w);
	CHECK_INT(check_std_image(path, 10), 0);
	CHECK_INT(count_entries(parent), 1);

	/* An image opened before the replacement keeps reading the old files. */
	struct gs_image *old;
	CHECK_INT(gs_image_open(path, &old, &err), 0);
	CHECK_INT(write_std_image(path, &agent_opts, 11, &err), 0);
	CHECK_INT(check_std_image(path, 11), 0);
	CHECK_INT(count_entries(parent), 1);
	CHECK_INT(gs_image_verify(old, 2, &err), 0);
	gs_image_close(old);
}

/* Runs a dump of seed in a child that SIGKILLs itself at the fault point `spec` names; returns 1 if it died that way. */
static int dump_killed_at(const char *path, const char *spec, uint32_t seed)
{
	pid_t pid = fork();
	if (pid == 0) {
		gs_log_set_level(GS_LOG_ERROR);
		gs_fault_configure(spec);
		struct gs_err err = { 0 };
		write_std_image(path, &agent_opts, seed, &err);
		_exit(3); /* not reached if the hook works */
	}
	int status = 0;
	waitpid(pid, &status, 0);
	return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

static void test_killed_mid_commit(void)
{
	char path[800];
	std_image("killed", 20, path, sizeof(path));
	char parent[800];
	snprintf(parent, sizeof(parent), "%s", path);
	*strrchr(parent, '/') = '\0';

	/* Killed with everything written but before the rename: DIR is the old image, the new one is unpublished. */
	CHECK(dump_killed_at(path, "image-publish=kill", 21));
	CHECK_INT(check_std_image(path, 20), 0);
	CHECK_INT(count_matching(parent, ".img.tmp-"), 1);
	/* The next writer never deletes a complete image (it may be a process's only copy): it keeps it by name. */
	struct gs_err err = { 0 };
	struct gs_image_writer *w;
	gs_log_set_level(GS_LOG_ERROR);
	CHECK_INT(image_test_writer_open(path, NULL, &w, &err), 0);
	CHECK_INT(count_matching(parent, ".img.tmp-"), 1); /* only its own */
	CHECK_INT(count_matching(parent, "img.kept-4242-"), 1);
	image_test_writer_abort(w);
	CHECK_INT(count_entries(parent), 2);
	char kept[1000];
	CHECK(find_matching(parent, "img.kept-4242-", kept, sizeof(kept)));
	CHECK_INT(check_std_image(kept, 21), 0); /* whole, restorable from there */
	gs_fs_remove_tree(AT_FDCWD, kept);

	/* Killed right after the exchange: DIR is the new image; the old one waits under a temporary name, kept too. */
	CHECK(dump_killed_at(path, "image-publish@2=kill", 22));
	CHECK_INT(check_std_image(path, 22), 0);
	CHECK_INT(count_matching(parent, ".img.tmp-"), 1);
	CHECK_INT(image_test_writer_open(path, NULL, &w, &err), 0);
	image_test_writer_abort(w);
	CHECK_INT(count_matching(parent, "img.kept-4242-"), 1);
	CHECK(find_matching(parent, "img.kept-4242-", kept, sizeof(kept)));
	CHECK_INT(check_std_image(kept, 20), 0);
	gs_fs_remove_tree(AT_FDCWD, kept);
	CHECK_INT(count_entries(parent), 1);

	/* A dump killed before sealing anything: its leftover is removed. */
	CHECK(dump_killed_at(path, "image-write@3=kill", 24));
	CHECK_INT(count_matching(parent, ".img.tmp-"), 1);
	CHECK_INT(image_test_writer_open(path, NULL, &w, &err), 0);
	image_test_writer_abort(w);
	CHECK_INT(count_entries(parent), 1);
	CHECK_INT(check_std_image(path, 22), 0);
	gs_log_set_level(GS_LOG_WARN);

	/* A dump killed before committing anything, at a fresh DIR: nothing that looks like an image. */
	char fresh[900];
	path_join(fresh, sizeof(fresh), parent, "fresh");
	CHECK(dump_killed_at(fresh, "image-publish=kill", 23));
	struct gs_image *img;
	CHECK_INT(gs_image_open(fresh, &img, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "no such directory");
}

static void test_abort_leaves_nothing(void)
{
	const char *dir = scratch_dir("abort");
	char path[800], cpu[900], f[1000];
	path_join(path, sizeof(path), dir, "img");
	struct gs_err err = { 0 };
	struct gs_image_writer *w;
	CHECK_INT(image_test_writer_open(path, &agent_opts, &w, &err), 0);
	CHECK_INT(std_describe(w, &err), 0);
	CHECK_INT(std_write_chunks(w, 5, &err), 0);
	CHECK_INT(gs_image_writer_cpu_dir(w, cpu, sizeof(cpu), &err), 0);
	file_in(f, sizeof(f), cpu, "core-1.img");
	spit(f, "x", 1);
	CHECK_INT(count_entries(dir), 1);
	image_test_writer_abort(w);
	CHECK_INT(count_entries(dir), 0);
	gs_image_writer_abort(NULL);
}

static void test_disk_full_injected(void)
{
	char path[800];
	std_image("enospc", 30, path, sizeof(path));
	char parent[800];
	snprintf(parent, sizeof(parent), "%s", path);
	*strrchr(parent, '/') = '\0';
	struct gs_err err = { 0 };
	struct gs_image_writer *w;

	/* Full while writing payloads. */
	gs_fault_configure("image-write@5=fail:ENOSPC");
	gs_log_set_level(GS_LOG_ERROR);
	CHECK_INT(image_test_writer_open(path, &agent_opts, &w, &err), 0);
	CHECK_INT(std_describe(w, &err), 0);
	CHECK_INT(std_write_chunks(w, 31, &err), GS_E_NO_SPACE);
	CHECK_CONTAINS(err.msg, "no space left on the file system holding");
	CHECK_CONTAINS(err.msg, path);
	/* The writer stays failed: more writes and the commit say the same, and commit cleans up. */
	uint8_t data[100];
	fill_pattern(data, 1, 2, 0, sizeof(data));
	struct gs_err err2 = { 0 };
	CHECK_INT(gs_image_write_chunk(w, 2, 0, data, 1, &err2), GS_E_NO_SPACE);
	CHECK_STR(err2.msg, err.msg);
	CHECK_INT(image_test_writer_commit(w, &err2), GS_E_NO_SPACE);
	CHECK_INT(count_entries(parent), 1);
	CHECK_INT(check_std_image(path, 30), 0);

	/* Full exactly when the manifest is written (payloads fit): commit fails and leaves nothing. */
	gs_fault_configure("");
	CHECK_INT(image_test_writer_open(path, &agent_opts, &w, &err), 0);
	CHECK_INT(std_describe(w, &err), 0);
	CHECK_INT(std_write_chunks(w, 32, &err), 0);
	gs_fault_configure("image-write=fail:ENOSPC"); /* the next write is the manifest's */
	CHECK_INT(image_test_writer_commit(w, &err), GS_E_NO_SPACE);
	CHECK_CONTAINS(err.msg, "manifest.img");
	CHECK_INT(count_entries(parent), 1);
	CHECK_INT(check_std_image(path, 30), 0);

	/* An I/O error is a failure (exit 1), not a full disk; DIR stays the old image. */
	gs_fault_configure("image-write@4=fail:EIO");
	CHECK_INT(image_test_writer_open(path, &agent_opts, &w, &err), 0);
	CHECK_INT(std_describe(w, &err), 0);
	CHECK_INT(std_write_chunks(w, 33, &err), GS_E_FAILURE);
	CHECK_CONTAINS(err.msg, "Input/output error");
	CHECK_INT(image_test_writer_commit(w, &err), GS_E_FAILURE);
	CHECK_INT(count_entries(parent), 1);
	CHECK_INT(check_std_image(path, 30), 0);

	/* Full while writing the list of CPU files at publish: nothing published, DIR intact. */
	char cpu[900], f[1000];
	gs_fault_configure("");
	CHECK_INT(image_test_writer_open(path, &agent_opts, &w, &err), 0);
	CHECK_INT(std_describe(w, &err), 0);
	CHECK_INT(std_write_chunks(w, 34, &err), 0);
	CHECK_INT(gs_image_writer_cpu_dir(w, cpu, sizeof(cpu), &err), 0);
	path_join(f, sizeof(f), cpu, "core-1.img");
	spit(f, "criu", 4);
	gs_fault_configure("image-write@2=fail:ENOSPC"); /* 1: the manifest, 2: cpu-files.img */
	CHECK_INT(image_test_writer_commit(w, &err), GS_E_NO_SPACE);
	CHECK_CONTAINS(err.msg, "cpu-files.img");
	CHECK_INT(count_entries(parent), 1);
	CHECK_INT(check_std_image(path, 30), 0);

	/* A failed rename at publish (EIO): nothing published, DIR intact, nothing left. */
	gs_fault_configure("image-publish=fail:EIO");
	CHECK_INT(image_test_writer_open(path, &agent_opts, &w, &err), 0);
	CHECK_INT(std_describe(w, &err), 0);
	CHECK_INT(std_write_chunks(w, 35, &err), 0);
	CHECK_INT(image_test_writer_commit(w, &err), GS_E_FAILURE);
	CHECK_CONTAINS(err.msg, "cannot rename");
	CHECK_INT(count_entries(parent), 1);
	CHECK_INT(check_std_image(path, 30), 0);
	gs_fault_configure("");
	gs_log_set_level(GS_LOG_WARN);
}

/* ------------------------------------------------------------- corruption */

static void test_not_an_image(void)
{
	struct gs_err err = { 0 };
	struct gs_image *img;
	const char *dir = scratch_dir("notimage");
	CHECK_INT(gs_image_open(dir, &img, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "is not a gpusnap image (no manifest.img)");
	char f[800];
	file_in(f, sizeof(f), dir, "nothing");
	CHECK_INT(gs_image_open(f, &img, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "no such directory");
	file_in(f, sizeof(f), dir, "manifest.img");
	spit(f, "", 0);
	CHECK_INT(gs_image_open(dir, &img, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "truncated");
	CHECK_INT(gs_image_open(f, &img, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "not a directory");
}

static void test_truncated_files(void)
{
	char path[800];
	std_image("truncated", 40, path, sizeof(path));
	char f[900];
	struct gs_err err = { 0 };
	struct gs_image *img;

	file_in(f, sizeof(f), path, "gpu-data-0001.img");
	struct stat sb;
	stat(f, &sb);
	CHECK_INT(truncate(f, sb.st_size - 4096), 0);
	CHECK_INT(gs_image_open(path, &img, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "data file 'gpu-data-0001.img' is truncated");
	CHECK_INT(truncate(f, 0), 0);
	CHECK_INT(gs_image_open(path, &img, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "'gpu-data-0001.img' is truncated: 0 of");
	CHECK_INT(truncate(f, sb.st_size + 4096), 0);
	CHECK_INT(gs_image_open(path, &img, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "the manifest says");

	std_image("truncated-manifest", 41, path, sizeof(path));
	file_in(f, sizeof(f), path, "manifest.img");
	stat(f, &sb);
	CHECK_INT(truncate(f, sb.st_size - 10), 0);
	CHECK_INT(gs_image_open(path, &img, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "manifest is truncated");
	CHECK_INT(truncate(f, 40), 0);
	CHECK_INT(gs_image_open(path, &img, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "manifest is truncated: 40 bytes");
}

static void test_missing_data_file(void)
{
	char path[800];
	std_image("missing", 42, path, sizeof(path));
	char f[900];
	file_in(f, sizeof(f), path, "gpu-data-0001.img");
	CHECK_INT(unlink(f), 0);
	struct gs_err err = { 0 };
	struct gs_image *img;
	CHECK_INT(gs_image_open(path, &img, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "data file 'gpu-data-0001.img' is missing");
}

static void test_flipped_bit_in_chunk(void)
{
	char path[800];
	std_image("bitflip", 43, path, sizeof(path));
	struct gs_err err = { 0 };
	struct gs_image *img;
	CHECK_INT(gs_image_open(path, &img, &err), 0);
	/* The second chunk of allocation 3 (offset 65536). */
	ptrdiff_t ai = gs_image_find_allocation(img, 3);
	size_t first, count;
	gs_image_allocation_chunks(img, (size_t)ai, &first, &count);
	const struct gs_image_chunk *c = gs_image_chunk_at(img, first + 1);
	CHECK(c->offset == 65536 && !(c->flags & GS_CHUNK_F_ZERO));
	char f[900];
	file_in(f, sizeof(f), path, gs_image_data_file_at(img, c->file_index)->name);
	uint64_t at = c->file_offset + 12345;
	gs_image_close(img);

	int fd = open(f, O_RDWR);
	uint8_t byte;
	CHECK_INT(pread(fd, &byte, 1, (off_t)at), 1);
	byte ^= 0x04;
	CHECK_INT(pwrite(fd, &byte, 1, (off_t)at), 1);
	close(fd);

	CHECK_INT(gs_image_open(path, &img, &err), 0); /* opening does not read payloads */
	void *buf;
	CHECK_INT(posix_memalign(&buf, 4096, 65536), 0);
	CHECK_INT(gs_image_read_chunk(img, first, buf, &err), 0);
	CHECK_INT(gs_image_read_chunk(img, first + 1, buf, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "(allocation 3, offset 65536, 65536 bytes)");
	CHECK_CONTAINS(err.msg, "is corrupt");
	struct gs_err verr = { 0 };
	CHECK_INT(gs_image_verify(img, 4, &verr), GS_E_IMAGE);
	CHECK_STR(verr.msg, err.msg);
	CHECK_INT(gs_image_verify(img, 1, &verr), GS_E_IMAGE);
	CHECK_CONTAINS(verr.msg, "allocation 3, offset 65536");
	free(buf);
	gs_image_close(img);
}

static void test_flipped_bit_in_manifest(void)
{
	char path[800];
	std_image("manifest-bit", 44, path, sizeof(path));
	char f[900];
	file_in(f, sizeof(f), path, "manifest.img");
	size_t len;
	unsigned char *buf = slurp(f, &len);
	struct gs_err err = { 0 };
	struct gs_image *img;
	int undetected = 0;
	/* A flipped bit anywhere (header, tables, heap, trailer) is caught. */
	for (size_t at = 0; at < len; at += 7) {
		buf[at] ^= 0x20;
		spit(f, buf, len);
		if (gs_image_open(path, &img, &err) != GS_E_IMAGE) {
			undetected++;
			gs_image_close(img);
		}
		buf[at] ^= 0x20;
	}
	CHECK_INT(undetected, 0);
	/* In the middle: a checksum mismatch. In the version field: still a checksum mismatch, not "version 3". */
	buf[len / 2] ^= 1;
	spit(f, buf, len);
	CHECK_INT(gs_image_open(path, &img, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "manifest checksum mismatch");
	buf[len / 2] ^= 1;
	buf[8] ^= 2;
	spit(f, buf, len);
	CHECK_INT(gs_image_open(path, &img, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "manifest checksum mismatch");
	buf[8] ^= 2;
	spit(f, buf, len);
	CHECK_INT(gs_image_open(path, &img, &err), 0);
	gs_image_close(img);
	free(buf);
}

static void test_unknown_version_and_bad_magic(void)
{
	char path[800];
	std_image("version", 45, path, sizeof(path));
	char f[900];
	file_in(f, sizeof(f), path, "manifest.img");
	size_t len;
	unsigned char *buf = slurp(f, &len);
	struct gs_err err = { 0 };
	struct gs_image *img;

	uint32_t v = GS_FMT_VERSION + 1;
	memcpy(buf + 8, &v, 4);
	manifest_fix_crc(buf, len);
	spit(f, buf, len);
	CHECK_INT(gs_image_open(path, &img, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "format version 3 is not supported (this gpusnap reads versions 1 to 2)");
	/* A newer version with a different framing is still named by its version. */
	v = 7;
	memcpy(buf + 8, &v, 4);
	spit(f, buf, 100);
	CHECK_INT(gs_image_open(path, &img, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "format version 7 is not supported");

	v = 1;
	memcpy(buf + 8, &v, 4);
	buf[0] = 'X';
	manifest_fix_crc(buf, len);
	spit(f, buf, len);
	CHECK_INT(gs_image_open(path, &img, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "bad magic");
	buf[0] = 'G';
	manifest_fix_crc(buf, len);
	spit(f, buf, len);
	CHECK_INT(gs_image_open(path, &img, &err), 0);
	gs_image_close(img);

	/* Data files: bad magic, corrupt header, version, a file of another image. */
	file_in(f, sizeof(f), path, "gpu-data-0000.img");
	size_t dlen;
	unsigned char *data = slurp(f, &dlen);
	data[1] ^= 1;
	spit(f, data, dlen);
	CHECK_INT(gs_image_open(path, &img, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "data file 'gpu-data-0000.img' has a bad magic");
	data[1] ^= 1;
	data[40] ^= 1;
	spit(f, data, dlen);
	CHECK_INT(gs_image_open(path, &img, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "'gpu-data-0000.img' has a corrupt header");
	data[40] ^= 1;
	spit(f, data, dlen);
	CHECK_INT(gs_image_open(path, &img, &err), 0);
	gs_image_close(img);

	char other[800];
	std_image("version-other", 46, other, sizeof(other));
	char of[900];
	file_in(of, sizeof(of), other, "gpu-data-0000.img");
	size_t olen;
	unsigned char *odata = slurp(of, &olen);
	CHECK(olen == dlen);
	spit(f, odata, olen);
	CHECK_INT(gs_image_open(path, &img, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "'gpu-data-0000.img' belongs to another image");
	free(odata);
	free(data);
	free(buf);
}

static void test_data_file_names(void)
{
	char name[GS_FMT_DATA_NAME_MAX];
	uint32_t idx = 99;
	gs_fmt_data_file_name(0, name);
	CHECK_STR(name, "gpu-data-0000.img");
	gs_fmt_data_file_name(12345, name);
	CHECK_STR(name, "gpu-data-12345.img");
	gs_fmt_data_file_name(UINT32_MAX, name);
	CHECK_STR(name, "gpu-data-4294967295.img");
	CHECK(gs_fmt_data_file_name_parse("gpu-data-0000.img", &idx) && idx == 0);
	CHECK(gs_fmt_data_file_name_parse("gpu-data-0042.img", &idx) && idx == 42);
	CHECK(gs_fmt_data_file_name_parse("gpu-data-12345.img", &idx) && idx == 12345);
	const char *bad[] = { "", "gpu-data-.img", "gpu-data-1.img", "gpu-data-00000.img", "gpu-data-012345.img",
			      "gpu-data-0000.img/", "gpu-data-0000.img/..", "../gpu-data-0000.img", "/etc/passwd",
			      "gpu-data-0000.IMG", "gpu-data-+001.img", "gpu-data- 001.img", "gpu-data-0000.img\n",
			      "gpu-data-4294967296.img", "gpu-data-99999999999999999999.img", "..", "." };
	for (size_t i = 0; i < GS_ARRAY_SIZE(bad); i++) {
		if (gs_fmt_data_file_name_parse(bad[i], &idx)) {
			fprintf(stderr, "  accepted '%s'\n", bad[i]);
			CHECK(!"hostile name accepted");
		}
	}
}

/* An image whose manifest lists its one data file under `name` at index 0. */
static int open_with_data_file_name(const char *dir, const char *name, struct gs_err *err)
{
	const char *path = dir;
	struct gs_manifest m = { 0 };
	struct gs_image_data_file file = { .index = 0, .size = 8192, .name = name };
	struct gs_image_gpu gpu = { .index = 0, .name = "gpu" };
	struct gs_image_allocation alloc = { .id = 1, .size = 4096 };
	uint8_t payload[4096];
	fill_pattern(payload, 1, 1, 0, sizeof(payload));
	struct gs_image_chunk chunk = { .alloc_id = 1, .length = 4096, .file_offset = 4096,
					.crc32c = gs_crc32c(0, payload, 4096) };
	m.info = (struct gs_image_info){ .gpusnap_version = "t", .hostname = "h", .source_comm = "c", .how = "agent",
					 .checksum_algo = GS_CSUM_CRC32C };
	memset(m.info.image_id, 0x11, 16);
	m.files = &file;
	m.nfiles = 1;
	m.gpus = &gpu;
	m.ngpus = 1;
	m.allocs = &alloc;
	m.nallocs = 1;
	m.chunks = &chunk;
	m.nchunks = 1;
	void *buf;
	size_t len;
	if (gs_manifest_encode(&m, &buf, &len, err))
		return -1;
	char f[900];
	file_in(f, sizeof(f), path, "manifest.img");
	spit(f, buf, len);
	free(buf);
	/* The real data file, under the only valid name. */
	uint8_t block[8192];
	gs_fmt_data_header_build(block, 1, m.info.image_id, 0);
	memcpy(block + 4096, payload, 4096);
	file_in(f, sizeof(f), path, "gpu-data-0000.img");
	spit(f, block, sizeof(block));
	struct gs_image *img;
	int rc = gs_image_open(path, &img, err);
	if (!rc)
		gs_image_close(img);
	return rc;
}

static void test_hostile_names(void)
{
	const char *dir = scratch_dir("hostile");
	struct gs_err err = { 0 };
	/* The crafted image is otherwise valid: with the right name it opens. */
	CHECK_INT(open_with_data_file_name(dir, "gpu-data-0000.img", &err), 0);
	const char *bad[] = { "../gpu-data-0000.img", "/etc/passwd", "gpu-data-0000.img/..", "..", "",
			      "gpu-data-0001.img", "gpu-data-00000.img", "cpu", "manifest.img", "sub/gpu-data-0000.img",
			      "gpu-data-0000.img\x1b[2J" };
	for (size_t i = 0; i < GS_ARRAY_SIZE(bad); i++) {
		gs_err_clear(&err);
		int rc = open_with_data_file_name(dir, bad[i], &err);
		CHECK_INT(rc, GS_E_IMAGE);
		CHECK_CONTAINS(err.msg, "has an unsafe or unexpected name");
	}
	CHECK(!strchr(err.msg, '\x1b')); /* shown with the escape replaced */

	/* A NUL inside the name's bytes (the heap string "gpu-data-0000.img" with byte 3 cleared). */
	CHECK_INT(open_with_data_file_name(dir, "gpu-data-0000.img", &err), 0);
	char f[900];
	file_in(f, sizeof(f), dir, "manifest.img");
	size_t len;
	unsigned char *buf = slurp(f, &len);
	unsigned char *hit = memmem(buf, len, "gpu-data-0000.img", 17);
	CHECK(hit != NULL);
	if (hit) {
		hit[3] = '\0';
		manifest_fix_crc(buf, len);
		spit(f, buf, len);
		struct gs_image *img;
		CHECK_INT(gs_image_open(dir, &img, &err), GS_E_IMAGE);
		CHECK_CONTAINS(err.msg, "invalid name");
	}
	free(buf);

	/* A data file that is a symlink (to a file the user can read) is refused, not followed. */
	CHECK_INT(open_with_data_file_name(dir, "gpu-data-0000.img", &err), 0);
	char data[900], target[900];
	file_in(data, sizeof(data), dir, "gpu-data-0000.img");
	file_in(target, sizeof(target), dir, "elsewhere.img");
	rename(data, target);
	CHECK_INT(symlink(target, data), 0);
	struct gs_image *img;
	CHECK_INT(gs_image_open(dir, &img, &err), GS_E_PERMISSION);
	CHECK_CONTAINS(err.msg, "a symbolic link");
	unlink(data);
	rename(target, data);
	file_in(f, sizeof(f), dir, "manifest.img");
	file_in(target, sizeof(target), dir, "m2");
	rename(f, target);
	CHECK_INT(symlink("m2", f), 0);
	CHECK_INT(gs_image_open(dir, &img, &err), GS_E_PERMISSION);
	CHECK_CONTAINS(err.msg, "manifest.img': a symbolic link");
}

static void test_permissions(void)
{
	char path[800];
	std_image("perm", 50, path, sizeof(path));
	char f[900];
	struct gs_err err = { 0 };
	struct gs_image *img;

	file_in(f, sizeof(f), path, "gpu-data-0000.img");
	CHECK_INT(chmod(f, 0666), 0);
	CHECK_INT(gs_image_open(path, &img, &err), GS_E_PERMISSION);
	CHECK_CONTAINS(err.msg, "gpu-data-0000.img': writable by others (mode 0666)");
	CHECK_INT(chmod(f, 0640), 0); /* group-readable is fine, writable is not */
	CHECK_INT(gs_image_open(path, &img, &err), 0);
	gs_image_close(img);

	file_in(f, sizeof(f), path, "manifest.img");
	CHECK_INT(chmod(f, 0620), 0);
	CHECK_INT(gs_image_open(path, &img, &err), GS_E_PERMISSION);
	CHECK_CONTAINS(err.msg, "writable by its group");
	CHECK_INT(chmod(f, 0600), 0);

	CHECK_INT(chmod(path, 0777), 0);
	CHECK_INT(gs_image_open(path, &img, &err), GS_E_PERMISSION);
	CHECK_CONTAINS(err.msg, "writable by others (mode 0777)");
	CHECK_INT(chmod(path, 0755), 0);
	CHECK_INT(gs_image_open(path, &img, &err), 0);
	gs_image_close(img);
}

/* --------------------------------------------------------- hostile sizes */

/* Writes buf as dir's manifest (with the CRC fixed) and returns gs_image_open's code, message in err. */
static int open_patched(const char *dir, unsigned char *buf, size_t len, struct gs_err *err)
{
	char f[900];
	file_in(f, sizeof(f), dir, "manifest.img");
	manifest_fix_crc(buf, len);
	spit(f, buf, len);
	struct gs_image *img;
	int rc = gs_image_open(dir, &img, err);
	if (!rc)
		gs_image_close(img);
	return rc;
}

static int hostile_sizes_cases(const char *path, int verbose)
{
	int failures = 0;
#define EXPECT(cond)                                                                 \
	do {                                                                         \
		if (!(cond)) {                                                       \
			failures++;                                                  \
			if (verbose)                                                 \
				fprintf(stderr, "  %d: expected %s: %s\n", __LINE__, #cond, err.msg); \
		}                                                                    \
	} while (0)
	char f[900];
	file_in(f, sizeof(f), path, "manifest.img");
	size_t len;
	unsigned char *orig = slurp(f, &len), *buf = malloc(len);
	struct gs_err err = { 0 };
	struct gs_fmt_section s;
	size_t at;

	/* A chunk section claiming 2^62 bytes (about 10^17 chunks). */
	memcpy(buf, orig, len);
	manifest_section(buf, GS_SEC_CHUNKS, &s, &at);
	s.length = 1ULL << 62;
	memcpy(buf + at, &s, sizeof(s));
	EXPECT(open_patched(path, buf, len, &err) == GS_E_IMAGE && strstr(err.msg, "lies outside the manifest"));

	/* An offset that wraps around when the length is added. */
	memcpy(buf, orig, len);
	manifest_section(buf, GS_SEC_ALLOCATIONS, &s, &at);
	s.offset = UINT64_MAX - 7;
	memcpy(buf + at, &s, sizeof(s));
	EXPECT(open_patched(path, buf, len, &err) == GS_E_IMAGE && strstr(err.msg, "lies outside the manifest"));

	/* Records of size 0 (no division by zero) and of 1 byte. */
	memcpy(buf, orig, len);
	manifest_section(buf, GS_SEC_CHUNKS, &s, &at);
	s.entry_size = 0;
	memcpy(buf + at, &s, sizeof(s));
	EXPECT(open_patched(path, buf, len, &err) == GS_E_IMAGE && strstr(err.msg, "expected at least 48"));

	/* 4 billion sections, and an enormous section entry. */
	struct gs_fmt_manifest_header h;
	memcpy(buf, orig, len);
	memcpy(&h, buf, sizeof(h));
	h.section_count = UINT32_MAX;
	memcpy(buf, &h, sizeof(h));
	EXPECT(open_patched(path, buf, len, &err) == GS_E_IMAGE && strstr(err.msg, "section table is invalid"));
	memcpy(&h, orig, sizeof(h));
	h.section_entry_size = UINT32_MAX;
	memcpy(buf, &h, sizeof(h));
	EXPECT(open_patched(path, buf, len, &err) == GS_E_IMAGE && strstr(err.msg, "section table is invalid"));

	/* A header claiming a 2^60-byte manifest. */
	memcpy(buf, orig, len);
	memcpy(&h, buf, sizeof(h));
	h.manifest_size = 1ULL << 60;
	memcpy(buf, &h, sizeof(h));
	EXPECT(open_patched(path, buf, len, &err) == GS_E_IMAGE && strstr(err.msg, "truncated"));

	/* A string whose length runs past the heap. */
	memcpy(buf, orig, len);
	manifest_section(buf, GS_SEC_INFO, &s, &at);
	struct gs_fmt_info info;
	memcpy(&info, buf + s.offset, sizeof(info));
	info.hostname.length = UINT64_MAX - 1;
	memcpy(buf + s.offset, &info, sizeof(info));
	EXPECT(open_patched(path, buf, len, &err) == GS_E_IMAGE && strstr(err.msg, "outside the heap"));

	/* A blob of 2^40 bytes. */
	memcpy(buf, orig, len);
	manifest_section(buf, GS_SEC_ALLOCATIONS, &s, &at);
	struct gs_fmt_allocation a;
	memcpy(&a, buf + s.offset, sizeof(a));
	a.blob.length = 1ULL << 40;
	memcpy(buf + s.offset, &a, sizeof(a));
	EXPECT(open_patched(path, buf, len, &err) == GS_E_IMAGE && strstr(err.msg, "invalid blob"));

	/* A blob within the size limit that starts near the end of the heap and runs past it. */
	memcpy(buf, orig, len);
	struct gs_fmt_section heap;
	manifest_section(buf, GS_SEC_HEAP, &heap, &at);
	manifest_section(buf, GS_SEC_ALLOCATIONS, &s, &at);
	memcpy(&a, buf + s.offset, sizeof(a));
	a.blob.offset = heap.length - 2;
	a.blob.length = 64;
	memcpy(buf + s.offset, &a, sizeof(a));
	EXPECT(open_patched(path, buf, len, &err) == GS_E_IMAGE && strstr(err.msg, "invalid blob"));

	/* A chunk of 2^63 bytes stored in a small file, and a ZERO chunk longer than its allocation. */
	memcpy(buf, orig, len);
	manifest_section(buf, GS_SEC_CHUNKS, &s, &at);
	struct gs_fmt_chunk c;
	memcpy(&c, buf + s.offset, sizeof(c));
	c.length = 1ULL << 63;
	memcpy(buf + s.offset, &c, sizeof(c));
	EXPECT(open_patched(path, buf, len, &err) == GS_E_IMAGE && strstr(err.msg, "extends past the allocation"));
	/* A payload offset far past the end of its data file. */
	memcpy(buf, orig, len);
	memcpy(&c, buf + s.offset, sizeof(c));
	c.file_offset = 1ULL << 40;
	memcpy(buf + s.offset, &c, sizeof(c));
	EXPECT(open_patched(path, buf, len, &err) == GS_E_IMAGE && strstr(err.msg, "lies past the end of 'gpu-data-"));

	/* A manifest file of 2 GiB (sparse): refused by size before anything is read. */
	memcpy(buf, orig, len);
	char big[900];
	file_in(big, sizeof(big), path, "manifest.img");
	spit(big, buf, len);
	EXPECT(truncate(big, 2LL << 30) == 0);
	struct gs_image *img;
	EXPECT(gs_image_open(path, &img, &err) == GS_E_IMAGE && strstr(err.msg, "more than the 1024 MiB"));
	spit(big, orig, len);
	int rc = gs_image_open(path, &img, &err);
	EXPECT(rc == 0);
	if (!rc)
		gs_image_close(img);
	free(orig);
	free(buf);
	return failures;
#undef EXPECT
}

static void test_hostile_sizes(void)
{
	char path[800];
	std_image("sizes", 60, path, sizeof(path));
#if defined(__SANITIZE_ADDRESS__)
	/* ASan aborts on any allocation beyond its limit, which is the check here. */
	CHECK_INT(hostile_sizes_cases(path, 1), 0);
#else
	/* In a child with 512 MiB of address space: a huge allocation would fail instead of succeeding lazily. */
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		struct rlimit rl = { 512ULL << 20, 512ULL << 20 };
		setrlimit(RLIMIT_AS, &rl);
		_exit(hostile_sizes_cases(path, 1) ? 1 : 0);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
#endif
}

/* ------------------------------------------------------------ scale */

static void test_many_allocations_and_huge_one(void)
{
	/* 10^6 allocations and one of 64 GiB (mostly zero, so nothing big is written). */
	const size_t n = 1000000;
	const char *dir = scratch_dir("scale");
	char path[800];
	path_join(path, sizeof(path), dir, "img");
	struct gs_err err = { 0 };
	struct gs_image_writer *w;
	double t0 = gs_now();
	CHECK_INT(image_test_writer_open(path, &agent_opts, &w, &err), 0);
	struct gs_image_gpu g = { .index = 0, .name = "gpu" };
	CHECK_INT(gs_image_writer_add_gpu(w, &g, &err), 0);
	int rc = 0;
	uint64_t blob = 0;
	for (size_t i = 0; i < n && !rc; i++) {
		struct gs_image_allocation a = { .id = (i * 7919) % n + 1, .va = 0x100000000ULL + i * 0x200000ULL,
						 .size = 512, .kind = GS_ALLOC_KIND_DEVICE, .blob = &blob,
						 .blob_len = sizeof(blob) };
		if (i % 2)
			a.flags = GS_ALLOC_F_NO_DATA;
		blob = i;
		rc = gs_image_writer_add_allocation(w, &a, &err);
		if (!rc && !(i % 2))
			rc = gs_image_write_zero_chunk(w, a.id, 0, 512, &err);
	}
	CHECK_INT(rc, 0);
	const uint64_t huge = 64ULL << 30;
	struct gs_image_allocation big = { .id = n + 1, .va = 0x7f0000000000ULL, .size = huge, .kind = GS_ALLOC_KIND_POOL };
	CHECK_INT(gs_image_writer_add_allocation(w, &big, &err), 0);
	uint8_t data[4096];
	fill_pattern(data, 8, n + 1, huge - 4096, 4096);
	CHECK_INT(gs_image_write_zero_chunk(w, n + 1, 0, huge - 4096, &err), 0);
	CHECK_INT(gs_image_write_chunk(w, n + 1, huge - 4096, data, 4096, &err), 0);
	CHECK_INT(image_test_writer_commit(w, &err), 0);
	if (err.code)
		fprintf(stderr, "  %s\n", err.msg);
	double t1 = gs_now();

	struct gs_image *img;
	CHECK_INT(gs_image_open(path, &img, &err), 0);
	double t2 = gs_now();
	if (!err.code) {
		CHECK_INT(gs_image_allocation_count(img), n + 1);
		CHECK_INT(gs_image_chunk_count(img), n / 2 + 2);
		ptrdiff_t bi = gs_image_find_allocation(img, n + 1);
		CHECK_INT(bi, (ptrdiff_t)n);
		size_t first, count;
		gs_image_allocation_chunks(img, (size_t)bi, &first, &count);
		CHECK_INT(count, 2);
		uint8_t out[4096];
		CHECK_INT(gs_image_read_chunk(img, first + 1, out, &err), 0);
		CHECK(!memcmp(out, data, sizeof(out)));
		CHECK(gs_image_chunk_at(img, first)->length == huge - 4096);
		ptrdiff_t ai = gs_image_find_allocation(img, 500000);
		CHECK(ai >= 0 && gs_image_allocation_at(img, (size_t)ai)->blob_len == sizeof(blob));
		struct gs_image_totals t;
		gs_image_totals(img, &t);
		CHECK(t.alloc_bytes == huge + 512ULL * n);
		CHECK_INT(gs_image_verify(img, 2, &err), 0);
		struct stat sb;
		char f[900];
		file_in(f, sizeof(f), path, "manifest.img");
		stat(f, &sb);
		printf("     10^6 allocations + 64 GiB one: manifest %.1f MB, write+commit %.2f s, open %.2f s\n",
		       (double)sb.st_size / 1e6, t1 - t0, t2 - t1);
		gs_image_close(img);
	}
}

/* -------------------------------------------------------------- describe */

static void test_describe(void)
{
	const char *dir = scratch_dir("describe");
	char path[800], cpu[900];
	path_join(path, sizeof(path), dir, "img");
	struct gs_err err = { 0 };
	struct gs_image_writer *w;
	CHECK_INT(image_test_writer_open(path, &agent_opts, &w, &err), 0);
	CHECK_INT(gs_image_writer_cpu_dir(w, cpu, sizeof(cpu), &err), 0);
	CHECK_INT(std_describe(w, &err), 0);
	CHECK_INT(std_write_chunks(w, 70, &err), 0);
	CHECK_INT(image_test_writer_commit(w, &err), 0);
	struct gs_image *img;
	CHECK_INT(gs_image_open(path, &img, &err), 0);
	if (err.code)
		return;

	struct gs_json j;
	gs_json_init(&j);
	gs_image_describe_json(img, &j);
	const char *s = gs_json_finish(&j);
	CHECK(s != NULL);
	CHECK_CONTAINS(s, "\"format_version\":1");
	CHECK_CONTAINS(s, "\"gpusnap_version\":\"" GPUSNAP_VERSION "\"");
	CHECK_CONTAINS(s, "\"how\":\"agent\"");
	CHECK_CONTAINS(s, "\"process\":{\"pid\":4242,\"comm\":\"python3\"}");
	CHECK_CONTAINS(s, "\"cpu_state\":true");
	CHECK_CONTAINS(s, "\"uuid\":\"GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf\"");
	CHECK_CONTAINS(s, "\"compute_capability\":\"9.0\"");
	CHECK_CONTAINS(s, "\"allocations\":{\"count\":6,\"total_bytes\":1708329");
	CHECK_CONTAINS(s, "{\"id\":3,\"gpu\":1,\"va\":\"0x7f0000400000\",\"size\":197608,\"kind\":\"app-vmm\"");
	CHECK_CONTAINS(s, "\"has_data\":false");
	CHECK_CONTAINS(s, "\"chunks\":{\"count\":13,\"zero\":8,\"zero_bytes\":462144,\"stored_bytes\":197609,"
			  "\"checksum\":\"crc32c\",\"data_bytes\":197609,\"compressed\":0,\"codec\":\"none\",\"ratio\":1,"
			  "\"fingerprinted\":0}");
	CHECK_CONTAINS(s, "\"metadata\":{\"model\":\"llama-3\",\"note\":\"\"}");
	CHECK_CONTAINS(s, "\"created\":\"20");
	CHECK_CONTAINS(s, "\"created_unix\":17");
	gs_json_free(&j);

	char *text = NULL;
	size_t tlen = 0;
	FILE *out = open_memstream(&text, &tlen);
	gs_image_describe_text(img, out);
	fclose(out);
	CHECK_CONTAINS(text, "format       version 1, written by gpusnap " GPUSNAP_VERSION);
	CHECK_CONTAINS(text, "by agent");
	CHECK_CONTAINS(text, "process      4242 (python3)");
	CHECK_CONTAINS(text, "cpu state    present (cpu/)");
	CHECK_CONTAINS(text, "\n  gpu 1      NVIDIA H100 80GB HBM3, compute 9.0, 79.19 GiB, GPU-b0b1");
	CHECK_CONTAINS(text, "allocations  6, 1.63 MiB (device 4, app-vmm 1, pool 1)");
	CHECK_CONTAINS(text, "chunks       13, 8 zero (451.31 KiB not stored), checksum crc32c");
	CHECK_CONTAINS(text, "metadata     model = llama-3");
	if (getenv("GPUSNAP_TEST_VERBOSE"))
		fputs(text, stdout);
	free(text);
	gs_image_close(img);
}

/* ------------------------------------------- seal in one place, publish in another */

/* The agent path: the CLI creates and locks the temporary directory, the agent writes and seals, CRIU fills cpu/, the CLI publishes. */
/* Published unsynced (the plugin's --leave-running): whole at DIR at once, replacing the old; synced later. */
static void test_publish_unsynced_then_sync(void)
{
	char path[800], cpu[900], f[1000];
	std_image("unsynced", 40, path, sizeof(path));
	struct gs_err err = { 0 };
	struct gs_image_tmp *t;
	CHECK_INT(gs_image_tmp_create(path, NULL, &t, &err), 0);
	CHECK_INT(gs_image_tmp_cpu_dir(t, cpu, sizeof(cpu), &err), 0);
	struct gs_image_writer_opts o = agent_opts;
	o.no_direct_io = o.no_data_sync = true;
	o.parallel_data_files = 4;
	CHECK_INT(seal_std_image_in(gs_image_tmp_path(t), &o, 41, &err), 0);
	path_join(f, sizeof(f), cpu, "pages-1.img");
	spit(f, "criu pages", 10);
	CHECK_INT(check_std_image(path, 40), 0); /* the old image until the publish */
	bool published = false;
	CHECK_INT(gs_image_publish_unsynced(t, &published, &err), 0);
	CHECK(published);
	gs_image_tmp_close(t);
	CHECK_INT(check_std_image(path, 41), 0);
	struct gs_image *img;
	CHECK_INT(gs_image_open(path, &img, &err), 0);
	CHECK_INT(gs_image_verify(img, 2, &err), 0);
	gs_image_close(img);
	path_join(f, sizeof(f), path, "cpu-files.img"); /* CRIU's files were listed and checksummed as by a synced publish */
	CHECK(access(f, R_OK) == 0);
	CHECK_INT(gs_image_sync(path, &err), 0);
	CHECK_INT(check_std_image(path, 41), 0);
	char missing[900];
	path_join(missing, sizeof(missing), path, "no-such-dir");
	CHECK_INT(gs_image_sync(missing, &err), GS_E_USAGE);
	CHECK_CONTAINS(err.msg, "no-such-dir");
}

static void test_seal_then_publish(void)
{
	char path[800], parent[800], cpu[900], f[1000];
	std_image("sealpub", 30, path, sizeof(path));
	snprintf(parent, sizeof(parent), "%s", path);
	*strrchr(parent, '/') = '\0';
	struct gs_err err = { 0 };

	struct gs_image_tmp *t;
	CHECK_INT(gs_image_tmp_create(path, NULL, &t, &err), 0);
	CHECK_STR(gs_image_tmp_target(t), path);
	CHECK_CONTAINS(gs_image_tmp_path(t), "/.img.tmp-");
	CHECK_INT(gs_image_tmp_cpu_dir(t, cpu, sizeof(cpu), &err), 0);
	struct gs_image_writer *w;
	CHECK_INT(gs_image_writer_open_in(gs_image_tmp_path(t), &agent_opts, &w, &err), 0);
	/* the owner's writer is not the publisher: commit refuses, seal works */
	CHECK_INT(std_describe(w, &err), 0);
	CHECK_INT(std_write_chunks(w, 31, &err), 0);
	CHECK_INT(gs_image_writer_seal(w, &err), 0);
	/* sealed: readable at its temporary path (for a rollback), DIR still the old image */
	struct gs_image *img;
	CHECK_INT(gs_image_open(gs_image_tmp_path(t), &img, &err), 0);
	CHECK(gs_image_get_info(img)->cpu_state);
	CHECK_INT(gs_image_verify(img, 2, &err), 0);
	gs_image_close(img);
	CHECK_INT(check_std_image(path, 30), 0);
	/* CRIU writes after the seal */
	path_join(f, sizeof(f), cpu, "inventory.img");
	spit(f, "criu", 4);
	bool published = false;
	CHECK_INT(gs_image_publish(t, &published, &err), 0);
	CHECK(published);
	gs_image_tmp_close(t);
	CHECK_INT(check_std_image(path, 31), 0);
	CHECK_INT(count_entries(parent), 1);
	CHECK_INT(gs_image_open(path, &img, &err), 0);
	CHECK_INT(gs_image_cpu_dir(img, cpu, sizeof(cpu), &err), 0);
	path_join(f, sizeof(f), cpu, "inventory.img");
	CHECK(access(f, R_OK) == 0);
	gs_image_close(img);

	/* a writer into someone else's directory: its abort leaves the directory to its owner */
	CHECK_INT(gs_image_tmp_create(path, NULL, &t, &err), 0);
	CHECK_INT(gs_image_writer_open_in(gs_image_tmp_path(t), &agent_opts, &w, &err), 0);
	CHECK_INT(std_describe(w, &err), 0);
	CHECK_INT(std_write_chunks(w, 32, &err), 0);
	gs_image_writer_abort(w);
	CHECK_INT(count_entries(gs_image_tmp_path(t)), 0);
	CHECK(access(gs_image_tmp_path(t), F_OK) == 0);
	/* an incomplete image is not sealed, and nothing of it stays */
	CHECK_INT(gs_image_writer_open_in(gs_image_tmp_path(t), &agent_opts, &w, &err), 0);
	CHECK_INT(std_describe(w, &err), 0);
	CHECK_INT(gs_image_writer_seal(w, &err), GS_E_FAILURE);
	CHECK_INT(count_entries(gs_image_tmp_path(t)), 0);
	/* publishing an unsealed directory is refused; DIR stays the image it was */
	CHECK_INT(gs_image_publish(t, &published, &err), GS_E_FAILURE);
	CHECK(!published);
	CHECK_CONTAINS(err.msg, "no sealed image");
	/* a sealed image already there cannot be written over */
	CHECK_INT(seal_std_image_in(gs_image_tmp_path(t), &agent_opts, 33, &err), 0);
	CHECK_INT(gs_image_writer_open_in(gs_image_tmp_path(t), &agent_opts, &w, &err), GS_E_USAGE);
	CHECK_CONTAINS(err.msg, "already holds an image");
	/* DIR turned into something that is not an image meanwhile: publish refuses, the sealed image stays for a rollback */
	char moved[900];
	snprintf(moved, sizeof(moved), "%s.moved", path);
	CHECK(rename(path, moved) == 0);
	CHECK(mkdir(path, 0700) == 0);
	path_join(f, sizeof(f), path, "notes.txt");
	spit(f, "x", 1);
	CHECK_INT(gs_image_publish(t, &published, &err), GS_E_USAGE);
	CHECK(!published);
	CHECK_INT(gs_image_open(gs_image_tmp_path(t), &img, &err), 0);
	gs_image_close(img);
	gs_image_tmp_discard(t);
	CHECK_INT(count_matching(parent, ".img.tmp-"), 0);
	CHECK(access(f, R_OK) == 0);
	CHECK_INT(check_std_image(moved, 31), 0);

	/* open_in refuses a directory others could change */
	const char *loose = scratch_dir("sealpub-loose");
	chmod(loose, 0770);
	CHECK_INT(gs_image_writer_open_in(loose, &agent_opts, &w, &err), GS_E_PERMISSION);
}

/*
 * CRIU's files listed before the publish (gs_image_tmp_list_cpu): a kept
 * image verifies as a published one, and one without the list is named by
 * gs_image_require_cpu_list. A reader holding DIR (gs_image_open_held) makes
 * a new writer's claim refuse, naming the reader.
 */
static void test_list_keep_and_hold(void)
{
	char path[800], cpu[900], f[1000], kept[1200];
	std_image("listkeep", 30, path, sizeof(path));
	struct gs_err err = { 0 };

	struct gs_image *held;
	CHECK_INT(gs_image_open_held(path, &held, &err), 0);
	struct gs_image_tmp *t;
	CHECK_INT(gs_image_tmp_create(path, NULL, &t, &err), GS_E_STATE);
	CHECK_CONTAINS(err.msg, "is being read by process");
	gs_image_close(held);

	CHECK_INT(gs_image_tmp_create(path, NULL, &t, &err), 0);
	CHECK_INT(gs_image_tmp_cpu_dir(t, cpu, sizeof(cpu), &err), 0);
	CHECK_INT(seal_std_image_in(gs_image_tmp_path(t), &agent_opts, 31, &err), 0);
	path_join(f, sizeof(f), cpu, "inventory.img");
	spit(f, "criu", 4);
	CHECK(!gs_image_tmp_cpu_listed(t));
	CHECK_INT(gs_image_tmp_list_cpu(t, &err), 0);
	CHECK(gs_image_tmp_cpu_listed(t));
	CHECK_INT(gs_image_tmp_keep(t, kept, sizeof(kept), &err), 0);
	CHECK_INT(check_std_image(path, 30), 0); /* DIR untouched */

	struct gs_image *img;
	CHECK_INT(gs_image_open_held(kept, &img, &err), 0);
	CHECK(gs_image_cpu_files(img, NULL, NULL));
	CHECK_INT(gs_image_require_cpu_list(img, &err), 0);
	CHECK_INT(gs_image_verify(img, 2, &err), 0);
	gs_image_close(img);

	path_join(f, sizeof(f), kept, "cpu-files.img");
	CHECK_INT(unlink(f), 0);
	CHECK_INT(gs_image_open(kept, &img, &err), 0);
	CHECK_INT(gs_image_require_cpu_list(img, &err), GS_E_IMAGE);
	CHECK_CONTAINS(err.msg, "no checksums of CRIU's files");
	gs_image_close(img);
}

int main(void)
{
	gs_log_init_from_env();
	scratch_init("image");
	RUN(test_roundtrip);
	RUN(test_roundtrip_buffered_and_tmpfs);
	RUN(test_unaligned_buffers);
	RUN(test_concurrent_writes);
	RUN(test_concurrent_writes_spread);
	RUN(test_writer_refuses_misuse);
	RUN(test_incomplete_image_not_committed);
	RUN(test_cpu_dir);
	RUN(test_replace_atomically);
	RUN(test_killed_mid_commit);
	RUN(test_seal_then_publish);
	RUN(test_list_keep_and_hold);
	RUN(test_publish_unsynced_then_sync);
	RUN(test_abort_leaves_nothing);
	RUN(test_disk_full_injected);
	RUN(test_not_an_image);
	RUN(test_truncated_files);
	RUN(test_missing_data_file);
	RUN(test_flipped_bit_in_chunk);
	RUN(test_flipped_bit_in_manifest);
	RUN(test_unknown_version_and_bad_magic);
	RUN(test_data_file_names);
	RUN(test_hostile_names);
	RUN(test_permissions);
	RUN(test_hostile_sizes);
	RUN(test_many_allocations_and_huge_one);
	RUN(test_describe);
	scratch_cleanup();
	return TEST_SUMMARY();
}
