/*
 * plugin_config.h - the settings of gpusnap_criu.so, the CRIU plugin
 * (docs/CRIU.md, "Settings"): one table of keys, each a row of the settings
 * table (common/settings.h) with its GPUSNAP_PLUGIN_* variable, read from a
 * configuration file of `key = value` lines and from criu's environment
 * (as the settings read it, once), which wins over the file.
 *
 * Container engines start runc, and runc starts criu, without their
 * caller's environment: the file is how settings reach a plugin run by them.
 * Anything that is not understood (an unknown key, a bad value, a line
 * without '=', a key given twice, a file another user may write) is an
 * error naming the file and line, never skipped: the plugin refuses the
 * dump or restore with it.
 *
 * No CUDA here: the map is checked for its form only; the plugin checks it
 * against the machine's GPUs when it restores.
 */
#ifndef GPUSNAP_CORE_PLUGIN_CONFIG_H
#define GPUSNAP_CORE_PLUGIN_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "image/codec.h"

/* The file read when GPUSNAP_PLUGIN_CONFIG is not set and the plugin's folder holds no gpusnap_criu.conf. */
#define GS_PLUGIN_CONFIG_ETC "/etc/gpusnap/criu-plugin.conf"
/* The file beside gpusnap_criu.so, read first: one plugin folder (runc's per-container libdir) has its own. */
#define GS_PLUGIN_CONFIG_NAME "gpusnap_criu.conf"
/* Larger files are refused: a configuration is a few lines. */
#define GS_PLUGIN_CONFIG_MAX_BYTES 65536
#define GS_PLUGIN_CONFIG_MAX_LINE 4096
#define GS_PLUGIN_MAP_MAX 1024

enum gs_plugin_key {
	GS_PK_MAP,
	GS_PK_NO_VERIFY,
	GS_PK_DRIVER,
	GS_PK_TIMEOUT,
	GS_PK_LEAVE_RUNNING,
	GS_PK_MULTI_GPU_DRIVER,
	GS_PK_COMPRESS,
	GS_PK_COUNT,
};

struct gs_plugin_config {
	char map[GS_PLUGIN_MAP_MAX]; /* restore: the GPU map, "FROM=TO" pairs separated by commas or spaces; "" none */
	bool no_verify;              /* restore: no checksum pass */
	bool driver;                 /* dump: the driver path even where an agent runs */
	double timeout_s;            /* dump: how long to wait for running GPU work; 0 no limit */
	int leave_running;           /* dump: -1 not set (CRIU's own option decides), 0 or 1 */
	bool multi_gpu_driver;       /* dump: a process without the agent on several GPUs is not refused */
	struct gs_compress compress; /* dump: the agents compress their images' chunks; codec 0: none */
	/* where each key's value came from: 0 the default, -1 the environment, else the file's line */
	int line[GS_PK_COUNT];
	char file[4096]; /* the file read, "" for none */
};

/* The defaults: no map, the checksum pass, the agent path, 30 s, leave_running not set. */
void gs_plugin_config_defaults(struct gs_plugin_config *c);

/*
 * Applies the `key = value` lines of text (len bytes) to c; name is the
 * file's name in messages. Blank lines and lines starting with '#' (after
 * blanks) are skipped; blanks around key and value are not part of them.
 * GS_E_USAGE on the first error, "NAME line N: ...".
 */
int gs_plugin_config_parse(struct gs_plugin_config *c, const char *text, size_t len, const char *name,
			   struct gs_err *err);

/*
 * Reads and applies the file at path: a regular file (a link is followed)
 * of at most GS_PLUGIN_CONFIG_MAX_BYTES, owned by root or this user and not
 * writable by group or others (it decides how restores are checked).
 * Sets c->file. Every failure, a missing file too, is GS_E_USAGE naming
 * the file.
 */
int gs_plugin_config_read(struct gs_plugin_config *c, const char *path, struct gs_err *err);

/* Applies each non-empty GPUSNAP_PLUGIN_* of the environment over c (the environment wins). */
int gs_plugin_config_env(struct gs_plugin_config *c, struct gs_err *err);

/*
 * The settings of one criu run: defaults, then one file, then the
 * environment. The file: $GPUSNAP_PLUGIN_CONFIG when set (it must exist;
 * set and empty: no file), else the first of the nsearch paths of search
 * that exists (a missing one is not an error).
 */
int gs_plugin_config_load(struct gs_plugin_config *c, const char *const *search, int nsearch, struct gs_err *err);

/* The key's name in the file and its variable ("map", "GPUSNAP_PLUGIN_MAP"). */
const char *gs_plugin_config_key(enum gs_plugin_key k);
const char *gs_plugin_config_env_name(enum gs_plugin_key k);
/* Where key k's value came from, for messages: "GPUSNAP_PLUGIN_MAP", "map in FILE line N", "the default". */
const char *gs_plugin_config_origin(const struct gs_plugin_config *c, enum gs_plugin_key k, char *buf, size_t n);

#endif
