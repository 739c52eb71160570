/*
 * cmd_inspect.c - `gpusnap inspect DIR`: what an image holds (process, GPUs,
 * allocations, checksums, CRIU's files, how and when it was taken, versions),
 * as text or JSON; --verify also reads every stored chunk and every listed
 * file of CRIU's and checks their checksums. Opening the image already
 * refuses one that is unsafe or incomplete (image.h: gs_image_open).
 */
#include <stdio.h>

#include "cli/cli.h"
#include "common/util.h"
#include "image/image.h"

static const char *const inspect_usage[] = {
	"gpusnap inspect [--verify] [--json] DIR",
	NULL,
};

int cmd_inspect(int argc, char **argv)
{
	bool json = false, verify = false;
	const char *dir = NULL;
	const struct gs_option opts[] = {
		GS_OPT_STRING_('D', "dir", &dir, "DIR", "the image directory (or give it as the argument)"),
		GS_OPT_BOOL_(0, "verify", &verify, "read every stored chunk and CRIU file and check its checksum"),
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
	if ((rc = gs_image_open(dir, &img, &err)))
		return cli_report_error(&err);
	double verify_s = 0;
	if (verify) {
		double t = gs_now();
		rc = gs_image_verify(img, 0, &err);
		verify_s = gs_now() - t;
	}
	struct gs_image_totals tot;
	gs_image_totals(img, &tot);
	size_t cpu_files = 0;
	uint64_t cpu_bytes = 0;
	bool cpu_listed = gs_image_cpu_files(img, &cpu_files, &cpu_bytes);
	if (json) {
		struct gs_json j;
		gs_json_init(&j);
		gs_json_object_begin(&j);
		gs_json_key(&j, "image");
		gs_image_describe_json(img, &j);
		gs_json_key(&j, "verify");
		if (verify) {
			gs_json_object_begin(&j);
			gs_json_kv_bool(&j, "ok", rc == 0);
			if (rc)
				gs_json_kv_string(&j, "message", err.msg);
			gs_json_kv_uint(&j, "stored_bytes", tot.stored_bytes);
			gs_json_kv_bool(&j, "cpu_files_checked", cpu_listed);
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
		if (verify && !rc) {
			char b[32], cb[32] = "";
			if (cpu_listed)
				snprintf(cb, sizeof(cb), " and %zu CRIU file%s", cpu_files, cpu_files == 1 ? "" : "s");
			printf("verify       ok: %llu stored chunks%s, %s checked in %.2f s\n",
			       (unsigned long long)(tot.chunks - tot.zero_chunks), cb,
			       gs_format_bytes(tot.stored_bytes + cpu_bytes, b, sizeof(b)), verify_s);
		}
	}
	gs_image_close(img);
	if (rc)
		cli_report_error(&err);
	return rc;
}
