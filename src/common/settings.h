/*
 * settings.h - every GPUSNAP_* environment variable, in one table
 * (settings.c): its type, default, allowed range and one line of
 * documentation. The same rows drive parsing, the messages for bad values,
 * README.md's table (`gpusnap _doc settings`), the manual pages' ENVIRONMENT
 * and the CRIU plugin's configuration keys (core/plugin_config.c).
 *
 * The environment is read once: by main() before a command runs and by the
 * agent's constructor (in the app, before it makes threads); a getter that
 * runs before either loads the table leniently, once. After that, setenv
 * changes nothing here: fault points, signal handlers and fork children read
 * parsed values, never the environment.
 *
 * A bad value is named in one line, "GPUSNAP_IO_THREADS='x' is not a number
 * from 1 to 64". A command refuses to start with it (exit 2, usage); the
 * agent, inside someone else's process, logs the line once and uses the
 * default. Only rows a command reads are checked by commands: a setting
 * meant for the app is the agent's to judge.
 *
 * Reads that stay outside the table, and why:
 *  - PATH (criu/criu.c, cli/cmd_help.c): searched for criu and man, not ours;
 *  - LD_PRELOAD (cli/cmd_run.c): read to prepend the agent for the child;
 *  - GPUSNAP_ALLOW_IO_URING before the agent's constructor
 *    (agent/agent_io_uring.c): libc has not set environ up yet, so it is
 *    read from /proc/self/environ, not with getenv.
 */
#ifndef GPUSNAP_COMMON_SETTINGS_H
#define GPUSNAP_COMMON_SETTINGS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "common/err.h"

enum gs_setting_type {
	GS_SET_BOOL,    /* 1, 0, yes, no, true, false, on, off */
	GS_SET_INT,     /* a decimal number within [min, max] */
	GS_SET_SIZE,    /* bytes, K/M/G/T suffixes (gs_parse_size), within [min, max] */
	GS_SET_SECONDS, /* seconds, fractions allowed (gs_parse_seconds), within [min, max] */
	GS_SET_STRING,  /* text, checked by its reader (a fault spec, a GPU map) */
	GS_SET_SHARE,   /* a size as GS_SET_SIZE, or a share of the host's memory, 0% to 100%; read as text */
	GS_SET_PATH,    /* a file or directory name */
	GS_SET_ENUM,    /* one of the row's choices */
};

/* Who reads a row: commands check only theirs, the agent only its own. */
enum gs_setting_scope {
	GS_SCOPE_CLI = 1,    /* the gpusnap command */
	GS_SCOPE_AGENT = 2,  /* libgpusnap.so in the app */
	GS_SCOPE_PLUGIN = 4, /* gpusnap_criu.so in criu; parsed by core/plugin_config.c with its file */
};

enum gs_setting_id {
	GS_S_LOG,
	GS_S_LIBCUDA,
	GS_S_LIBNVML,
	GS_S_RUN_DIR,
	GS_S_DEVICE_PATH_PREFIX,
	GS_S_FAULT,
	GS_S_CRIU,
	GS_S_CRIU_TIMEOUT,
	GS_S_RESTORE_LAZY,
	GS_S_AGENT,
	GS_S_STAGE_DIR,
	GS_S_STORE,
	GS_S_RESERVE,
	GS_S_AGENT_HOOKS,
	GS_S_AGENT_LOG,
	GS_S_STAGING_MODE,
	GS_S_STAGING_UNPIN,
	GS_S_STAGING_THREADS,
	GS_S_STAGING_POPULATE,
	GS_S_FORK_DROP_DEVICE,
	GS_S_GPU_ZERO_SCAN,
	GS_S_ZERO_CHUNKS,
	GS_S_HOST_MEMORY_LIMIT,
	GS_S_HOST_MEMORY_MARGIN,
	GS_S_SPILL_DIR,
	GS_S_MULTI_GPU_DRIVER,
	GS_S_CHUNK_SIZE,
	GS_S_HOST_COPY,
	GS_S_SHRINK_STACK,
	GS_S_RDMA,
	GS_S_ALLOW_IO_URING,
	GS_S_IO_THREADS,
	GS_S_GATE_FENCE,
	GS_S_AGENT_NO_DUMP_RUNNING,
	GS_S_PLUGIN_CONFIG,
	GS_S_PLUGIN_MAP,
	GS_S_PLUGIN_NO_VERIFY,
	GS_S_PLUGIN_DRIVER,
	GS_S_PLUGIN_TIMEOUT,
	GS_S_PLUGIN_LEAVE_RUNNING,
	GS_S_PLUGIN_COMPRESS,
	GS_S_COUNT,
};

struct gs_setting_def {
	const char *name; /* the variable */
	const char *key;  /* the plugin's configuration-file key, NULL for none */
	enum gs_setting_type type;
	unsigned scope;      /* enum gs_setting_scope bits */
	const char *dflt;    /* the default as a value would be written; NULL: none, or computed (the doc says) */
	double min, max;     /* INT, SIZE, SECONDS: the allowed range */
	const char *choices; /* ENUM: "a|b|c", the first the default unless dflt says otherwise */
	bool hidden;         /* for tests and diagnosis: left out of README.md and the manual pages */
	const char *doc;     /* one line */
};

/* The table, GS_S_COUNT rows, indexed by enum gs_setting_id. */
const struct gs_setting_def *gs_setting_def(enum gs_setting_id id);
/* The row named name (a variable or, with key, a plugin key), or -1. */
int gs_setting_find(const char *name, bool key);

enum gs_settings_mode {
	GS_SETTINGS_COMMAND, /* the first bad value of a GS_SCOPE_CLI row fails the load, GS_E_USAGE */
	GS_SETTINGS_AGENT,   /* every bad value is kept for gs_settings_warn and replaced by the default */
};

/*
 * Reads the environment into the settings, replacing what was read before
 * (tests call it again after setenv). In GS_SETTINGS_COMMAND mode, returns
 * GS_E_USAGE with err naming the first bad value of a row commands read.
 */
int gs_settings_load(enum gs_settings_mode mode, struct gs_err *err);
/* Logs each bad value of the last load once (pr_warn), for the agent once its log is open. */
void gs_settings_warn(void);

/*
 * Parses text as row id's value; 0, or -1 with msg (n bytes) holding the one
 * line "NAME='text' is not ...". out receives the parsed value of its type.
 */
union gs_setting_value {
	bool b;
	int i;
	uint64_t size;
	double seconds;
	int choice; /* ENUM: the index in choices */
};
int gs_setting_parse(enum gs_setting_id id, const char *text, union gs_setting_value *out, char *msg, size_t n);

/* Whether the variable was set, non-empty, with a good value. */
bool gs_setting_is_set(enum gs_setting_id id);
/* The parsed value, or the default where unset or bad (0 where the row has none). */
bool gs_setting_bool(enum gs_setting_id id);
int gs_setting_int(enum gs_setting_id id);
uint64_t gs_setting_size(enum gs_setting_id id);
double gs_setting_seconds(enum gs_setting_id id);
int gs_setting_choice(enum gs_setting_id id);
/* STRING, PATH: the value, NULL where unset or empty. */
const char *gs_setting_str(enum gs_setting_id id);
/* The text as read, NULL where unset ("" where set empty): for rows where empty means something. */
const char *gs_setting_raw(enum gs_setting_id id);

/* README.md's table, markdown, one row a setting (hidden ones left out). */
void gs_settings_markdown(FILE *out);
/* "yes or no", "number from 1 to 64", ...: what a row accepts, for docs. */
const char *gs_setting_accepts(enum gs_setting_id id, char *buf, size_t n);

#endif
