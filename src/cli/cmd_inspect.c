/*
 * cmd_inspect.c - `gpusnap inspect DIR`: what an image holds (process, GPUs,
 * allocations, checksums, CRIU's files, how and when it was taken, versions),
 * as text or JSON; --verify also reads every stored chunk and every listed
 * file of CRIU's and checks their checksums. Opening the image already
 * refuses one that is unsafe or incomplete (image.h: gs_image_open); --verify
 * holds it for reading meanwhile (gs_image_open_held) and fails an image
 * without checksums of CRIU's files unless --allow-unverified-cpu. An
 * image of a process tree (dump --tree) lists the GPU image of each of its
 * CUDA processes too, and --verify checks those as well.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/dump_tree.h"
#include "cli/interrupt.h"
#include "common/util.h"
#include "image/image.h"

static const char *const inspect_usage[] = {
	"gpusnap inspect [--verify [--allow-unverified-cpu]] [--json] DIR",
	NULL,
};

const struct cli_doc inspect_doc = {
	.args = "DIR",
	.description =
		"Shows what the image in DIR holds: the process (or each process of a tree), its GPUs and their "
		"memory, the chunks stored and those that were all zero. It needs no GPU and no CRIU.\n\n"
		"--verify reads every stored chunk and every listed CRIU file and checks its checksum (CRC-32C).",
	.exits = (const struct cli_doc_exit[]){ { GS_E_FAILURE, "" }, { GS_E_USAGE, "" },
						{ GS_E_PERMISSION, "an image path that others could change (named)" },
						{ GS_E_IMAGE, "image missing, truncated, corrupt or of an unknown version; with "
							      "--verify, a wrong checksum (the file or chunk is named)" },
						{ 0, NULL } },
	.env = "GPUSNAP_LOG",
	.examples = (const struct cli_doc_example[]){
		{ "gpusnap inspect --verify /ckpt/job", "Check that an image is whole before moving it." },
		{ NULL, NULL } },
};

/* The GPU images of a tree image's processes (none for other images), each opened and checked, verified with verify. */
struct tree_part {
	pid_t pid;
	struct gs_image *img;
	struct gs_image_totals tot;
};

static int open_tree_parts(const char *dir, struct gs_image *img, bool verify, struct tree_part **parts, int *n,
			   struct gs_err *err)
{
	*parts = NULL;
	*n = 0;
	if (strcmp(gs_image_get_info(img)->how, DUMP_TREE_HOW))
		return 0;
	pid_t *pids;
	int rc = dump_tree_parse_pids(gs_image_metadata_get(img, DUMP_TREE_META_PIDS), &pids, n, err);
	if (rc)
		return rc;
	*parts = calloc((size_t)*n, sizeof(**parts));
	if (!*parts) {
		free(pids);
		*n = 0;
		return gs_fail(err, GS_E_FAILURE, "out of memory");
	}
	for (int i = 0; i < *n && !rc; i++) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/%s/%d", dir, DUMP_TREE_PROCS_DIR, (int)pids[i]);
		(*parts)[i].pid = pids[i];
		if (!(rc = gs_image_open(path, &(*parts)[i].img, err)) && verify) {
			gs_image_set_verify_fingerprints((*parts)[i].img, true);
			rc = gs_image_verify((*parts)[i].img, 0, err);
		}
		if ((*parts)[i].img)
			gs_image_totals((*parts)[i].img, &(*parts)[i].tot);
	}
	free(pids);
	return rc;
}

int cmd_inspect(int argc, char **argv)
{
	bool json = false, verify = false, allow_unverified_cpu = false;
	const char *dir = NULL;
	const struct gs_option opts[] = {
		GS_OPT_STRING_('D', "dir", &dir, "DIR", "the image directory (or give it as the argument)"),
		GS_OPT_BOOL_(0, "verify", &verify,
			     "read every stored chunk and CRIU file and check its checksum (and each chunk's fingerprint)"),
		GS_OPT_BOOL_(0, "allow-unverified-cpu", &allow_unverified_cpu,
			     "--verify passes an image without checksums of CRIU's files (its GPU data checked only)"),
		GS_OPT_BOOL_(0, "json", &json, "print as JSON"),
		GS_OPT_END_(),
	};
	int nargs;
	int rc = cli_parse(argc, argv, opts, inspect_usage, 0, &nargs);
	if (rc)
		return rc == GS_PARSE_HELP ? 0 : rc;
	if (nargs == 1 && !dir)
		dir = argv[0];
	else if (nargs != 0 || !dir) {
		gs_print_usage(stderr, inspect_usage, opts);
		return GS_E_USAGE;
	}
	struct gs_err err = { 0 };
	struct gs_image *img;
	/* --verify holds the image for reading (a dump replacing it waits): what is read is what is checked */
	if ((rc = verify ? gs_image_open_held(dir, &img, &err) : gs_image_open(dir, &img, &err)))
		return cli_report_error(&err);
	double verify_s = 0, t = gs_now();
	/* verified means every file a restore uses was checked: CRIU's files without checksums only when asked */
	bool cpu_unverified = verify && gs_image_require_cpu_list(img, &err);
	if (cpu_unverified && !allow_unverified_cpu) {
		rc = err.code;
		cli_err_append(&err, "gpusnap inspect --verify --allow-unverified-cpu checks the rest");
	} else if (verify) {
		gs_err_clear(&err);
		gs_image_set_verify_fingerprints(img, true); /* and the chunks' fingerprints, where recorded */
		rc = gs_image_verify(img, 0, &err);
	}
	struct tree_part *parts = NULL;
	int nparts = 0;
	struct gs_err perr = { 0 };
	int prc = open_tree_parts(dir, img, verify && !rc, &parts, &nparts, &perr);
	if (!rc && prc) {
		rc = prc;
		err = perr;
	}
	verify_s = gs_now() - t;
	struct gs_image_totals tot;
	gs_image_totals(img, &tot);
	for (int i = 0; i < nparts; i++) {
		tot.chunks += parts[i].tot.chunks;
		tot.zero_chunks += parts[i].tot.zero_chunks;
		tot.stored_bytes += parts[i].tot.stored_bytes;
	}
	size_t cpu_files = 0;
	uint64_t cpu_bytes = 0;
	bool cpu_listed = gs_image_cpu_files(img, &cpu_files, &cpu_bytes);
	if (json) {
		struct gs_json j;
		cli_json_begin_outcome(&j, "inspect", rc, &err);
		gs_json_key(&j, "image");
		gs_image_describe_json(img, &j);
		if (nparts) {
			gs_json_key(&j, "processes");
			gs_json_array_begin(&j);
			for (int i = 0; i < nparts; i++) {
				gs_json_object_begin(&j);
				gs_json_kv_int(&j, "pid", parts[i].pid);
				if (parts[i].img)
					gs_json_kv_string(&j, "how", gs_image_get_info(parts[i].img)->how);
				gs_json_kv_uint(&j, "allocation_bytes", parts[i].tot.alloc_bytes);
				gs_json_kv_uint(&j, "stored_bytes", parts[i].tot.stored_bytes);
				gs_json_object_end(&j);
			}
			gs_json_array_end(&j);
		}
		gs_json_key(&j, "verify");
		if (verify) {
			gs_json_object_begin(&j);
			gs_json_kv_bool(&j, "ok", rc == 0);
			if (rc)
				gs_json_kv_string(&j, "message", err.msg);
			gs_json_kv_uint(&j, "stored_bytes", tot.stored_bytes);
			gs_json_kv_bool(&j, "cpu_files_checked", cpu_listed);
			gs_json_kv_bool(&j, "cpu_files_unverified_allowed", cpu_unverified && allow_unverified_cpu);
			gs_json_kv_uint(&j, "cpu_bytes", cpu_bytes);
			gs_json_kv_double(&j, "seconds", verify_s);
			gs_json_object_end(&j);
		} else {
			gs_json_null(&j);
		}
		gs_json_object_end(&j);
		cli_json_print(&j);
	} else {
		gs_image_describe_text(img, stdout);
		for (int i = 0; i < nparts; i++) {
			char b[32], how[64]; /* the image says how it was written */
			if (parts[i].img)
				printf("%-12s %d: %s path, %s of GPU data in %s/%s/%d\n", i ? "" : "processes", (int)parts[i].pid,
				       gs_printable(how, sizeof(how), gs_image_get_info(parts[i].img)->how),
				       gs_format_bytes(parts[i].tot.stored_bytes, b, sizeof(b)), dir, DUMP_TREE_PROCS_DIR,
				       (int)parts[i].pid);
		}
		if (verify && !rc) {
			char b[32], cb[32] = "";
			if (cpu_listed)
				snprintf(cb, sizeof(cb), " and %zu CRIU file%s", cpu_files, cpu_files == 1 ? "" : "s");
			printf("verify       ok: %llu stored chunks%s, %s checked in %.2f s%s\n",
			       (unsigned long long)(tot.chunks - tot.zero_chunks), cb,
			       gs_format_bytes(tot.stored_bytes + cpu_bytes, b, sizeof(b)), verify_s,
			       cpu_unverified ? " (CRIU's files unverified: they have no checksums)" : "");
		}
	}
	for (int i = 0; i < nparts; i++)
		gs_image_close(parts[i].img);
	free(parts);
	gs_image_close(img);
	if (rc)
		cli_report_error(&err);
	return rc;
}
