/*
 * cmd_gc.c - `gpusnap gc STORE`: removes the chunk store's objects that no
 * image refers to (image/store.h: gs_store_gc), safely while dumps write
 * into the store: a running dump's objects are listed in its ref, which gc
 * keeps while the dump holds its lock. --dry-run says what would go.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "common/util.h"
#include "image/store.h"

static const char *const gc_usage[] = {
	"gpusnap gc [--dry-run] [--wait SECONDS] [--json] STORE",
	NULL,
};

#define DEFAULT_WAIT_S 30.0

const struct cli_doc gc_doc = {
	.args = "STORE",
	.description =
		"Removes every object of the chunk store STORE (dump --store) that no image refers to: the images "
		"the store's refs name (each dump registers there before it writes into the store) keep the "
		"objects their manifests name, and a dump still running keeps every object it listed, so gc may "
		"run while dumps write into the store. A ref whose image is gone, or no longer names this store, "
		"is removed, as are a dead dump's ref and its unfinished objects; but a complete image such a dump "
		"left beside DIR (.DIR.tmp-*, or DIR.kept-* once a later dump renamed it), which may be a process's "
		"only copy, keeps its objects while it is there. Remove an image directory (rm -r), then run gc to "
		"free what only it used.\n\n"
		"gc holds the store's lock for its whole scan and removal; another gc, or a dump creating an "
		"object at that moment, is waited for (--wait, default 30 s). An image a ref names that cannot be "
		"read stops gc before anything is removed.",
	.exits = (const struct cli_doc_exit[]){ { GS_E_FAILURE, "an I/O error reading or removing a file of STORE" },
						{ GS_E_USAGE, "bad options" },
						{ GS_E_PERMISSION, "STORE or a directory above it could be changed by others, "
								   "or STORE is another user's (named)" },
						{ GS_E_STATE, "STORE stayed locked by another gc or a dump longer than --wait" },
						{ GS_E_IMAGE, "STORE is not a chunk store, is damaged, or an image its refs "
							      "name cannot be read (named; nothing was removed)" },
						{ 0, NULL } },
	.env = "GPUSNAP_LOG",
	.examples = (const struct cli_doc_example[]){
		{ "rm -r /ckpt/series/20261101T0000Z && gpusnap gc /ckpt/store",
		  "Drop the oldest image of a series and free the chunks only it used." },
		{ "gpusnap gc --dry-run /ckpt/store", "Say what would be removed, remove nothing." },
		{ NULL, NULL } },
};

int cmd_gc(int argc, char **argv)
{
	bool dry_run = false, json = false;
	double wait_s = DEFAULT_WAIT_S;
	const struct gs_option opts[] = {
		GS_OPT_BOOL_(0, "dry-run", &dry_run, "say what would be removed; remove nothing"),
		GS_OPT_SECONDS_(0, "wait", &wait_s, "SECONDS",
				"wait at most this long for the store's lock (another gc, a dump creating an object; "
				"default 30)"),
		GS_OPT_BOOL_(0, "json", &json, "print the outcome as JSON"),
		GS_OPT_END_(),
	};
	int nargs;
	int rc = cli_parse(argc, argv, opts, gc_usage, 0, &nargs);
	if (rc)
		return rc == GS_PARSE_HELP ? 0 : rc;
	if ((rc = cli_want_args("gc", argv, nargs, 1, "STORE")))
		return rc;
	char *listed = NULL;
	size_t listed_len = 0;
	FILE *list = json ? NULL : open_memstream(&listed, &listed_len);
	struct gs_store_gc_result r;
	struct gs_err err = { 0 };
	double t0 = gs_now();
	rc = gs_store_gc(argv[0], dry_run, wait_s, &r, list, &err);
	if (list)
		fclose(list);
	if (rc) {
		free(listed);
		return cli_report_error(&err);
	}
	if (!json) {
		/* each line "object NAME" or "ref FILE IMAGE", as gs_store_gc wrote it */
		for (char *line = listed, *next; line && *line; line = next) {
			next = strchr(line, '\n');
			if (next)
				*next++ = '\0';
			printf("%s %s\n", dry_run ? "would remove" : "removed", line);
			if (!next)
				break;
		}
		char b[32];
		printf("%s: %" PRIu64 " of %" PRIu64 " objects (%s) %s; %" PRIu64 " of %" PRIu64 " refs, %" PRIu64
		       " unfinished objects of dead dumps; %" PRIu64 " images keep the rest\n",
		       argv[0], r.objects_removed, r.objects, gs_format_bytes(r.bytes_removed, b, sizeof(b)),
		       dry_run ? "would be removed" : "removed", r.refs_removed, r.refs, r.temp_removed, r.images);
		free(listed);
		return 0;
	}
	free(listed);
	struct gs_json j;
	cli_json_begin_outcome(&j, "gc", 0, NULL);
	gs_json_kv_string(&j, "store", argv[0]);
	gs_json_kv_bool(&j, "dry_run", dry_run);
	gs_json_kv_uint(&j, "objects", r.objects);
	gs_json_kv_uint(&j, "objects_removed", r.objects_removed);
	gs_json_kv_uint(&j, "bytes_removed", r.bytes_removed);
	gs_json_kv_uint(&j, "refs", r.refs);
	gs_json_kv_uint(&j, "refs_removed", r.refs_removed);
	gs_json_kv_uint(&j, "temp_removed", r.temp_removed);
	gs_json_kv_uint(&j, "images", r.images);
	gs_json_kv_double(&j, "total_s", gs_now() - t0);
	gs_json_object_end(&j);
	cli_json_print(&j);
	return 0;
}
