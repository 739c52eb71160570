/*
 * json_out.c - the --json documents of the gpusnap command (see cli.h).
 *
 * Every document is one object on stdout that opens with "schema"
 * ("gpusnap/<command>/<version>", described by docs/json/<command>.json),
 * "action" (the command) and "ok", and on failure "exit_code", "error" (the
 * exit code's name) and "message" (the error line without "gpusnap: ").
 * A command asked for --json that fails before it printed a document of its
 * own (no such process, no driver, a bad argument) prints that opening part
 * alone, so a caller always gets one object. The versions live in one table
 * here: adding a field keeps a command's version; removing, renaming or
 * retyping one bumps it (README.md, "JSON output").
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static const struct {
	const char *command;
	int version;
} schema_versions[] = {
	{ "suspend", 1 }, { "resume", 1 }, { "state", 1 }, { "dump", 1 }, { "restore", 1 }, { "inspect", 1 }, { "switch", 1 },
	{ "export", 1 }, { "gc", 1 },
};

/* What this run of gpusnap printed and reported, for the document of a failure (cli_json_end_command). */
static struct {
	char command[32]; /* the command whose --json was given; empty without --json */
	bool printed;
	int code;
	char message[GS_ERR_MSG_MAX];
} run;

static int schema_version(const char *command)
{
	for (size_t i = 0; i < sizeof(schema_versions) / sizeof(schema_versions[0]); i++)
		if (!strcmp(schema_versions[i].command, command))
			return schema_versions[i].version;
	return 0; /* no schema: matches none of docs/json, so the schema test fails */
}

void cli_json_begin_outcome(struct gs_json *j, const char *action, int rc, const struct gs_err *err)
{
	char schema[64];
	snprintf(schema, sizeof(schema), "gpusnap/%s/%d", action, schema_version(action));
	gs_json_init(j);
	gs_json_object_begin(j);
	gs_json_kv_string(j, "schema", schema);
	gs_json_kv_string(j, "action", action);
	gs_json_kv_bool(j, "ok", rc == 0);
	if (rc) {
		gs_json_kv_int(j, "exit_code", rc);
		gs_json_kv_string(j, "error", gs_exit_name(rc));
		gs_json_kv_string(j, "message", err && err->msg[0] ? err->msg : gs_exit_name(rc));
	}
}

void cli_json_print(struct gs_json *j)
{
	const char *text = gs_json_finish(j);
	if (text) {
		printf("%s\n", text);
		run.printed = true;
	}
	gs_json_free(j);
}

void cli_json_note_options(const char *command, const struct gs_option *opts)
{
	for (const struct gs_option *o = opts; o->type != GS_OPT_END; o++)
		if (o->type == GS_OPT_BOOL && o->long_name && !strcmp(o->long_name, "json") && *(bool *)o->value)
			snprintf(run.command, sizeof(run.command), "%s", command);
}

void cli_json_note_error(int code, const char *message)
{
	run.code = code;
	snprintf(run.message, sizeof(run.message), "%s", message);
}

int cli_json_end_command(int rc)
{
	if (!rc || !run.command[0] || run.printed)
		return rc;
	struct gs_err err = { .code = rc };
	if (run.code == rc)
		snprintf(err.msg, sizeof(err.msg), "%s", run.message);
	struct gs_json j;
	cli_json_begin_outcome(&j, run.command, rc, &err);
	gs_json_object_end(&j);
	cli_json_print(&j);
	fflush(stdout);
	return rc;
}
