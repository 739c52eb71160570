/*
 * plugin_config.c - the CRIU plugin's settings: the key table, the parser
 * of its configuration file, the environment over it (plugin_config.h).
 */
#include "core/plugin_config.h"

#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/options.h"
#include "common/settings.h"

enum key_type { T_MAP, T_BOOL, T_SECONDS, T_TRISTATE, T_COMPRESS };

/*
 * Every setting, once: its row of the settings table (common/settings.c),
 * which names its key in the file and its variable and documents it, and
 * how the value is kept here. docs/CRIU.md, "Settings", lists the same.
 */
static const struct key_def {
	enum gs_setting_id id;
	enum key_type type;
	size_t field; /* T_BOOL: where in struct gs_plugin_config its bool is */
} keys[GS_PK_COUNT] = {
	[GS_PK_MAP] = { GS_S_PLUGIN_MAP, T_MAP, 0 },
	[GS_PK_NO_VERIFY] = { GS_S_PLUGIN_NO_VERIFY, T_BOOL, offsetof(struct gs_plugin_config, no_verify) },
	[GS_PK_DRIVER] = { GS_S_PLUGIN_DRIVER, T_BOOL, offsetof(struct gs_plugin_config, driver) },
	[GS_PK_TIMEOUT] = { GS_S_PLUGIN_TIMEOUT, T_SECONDS, 0 },
	[GS_PK_LEAVE_RUNNING] = { GS_S_PLUGIN_LEAVE_RUNNING, T_TRISTATE, 0 },
	[GS_PK_MULTI_GPU_DRIVER] = { GS_S_MULTI_GPU_DRIVER, T_BOOL, offsetof(struct gs_plugin_config, multi_gpu_driver) },
	[GS_PK_COMPRESS] = { GS_S_PLUGIN_COMPRESS, T_COMPRESS, 0 },
};
#define KEY(k) (gs_setting_def(keys[k].id)->key)
#define ENV(k) (gs_setting_def(keys[k].id)->name)

#define DEFAULT_TIMEOUT_S 30.0

void gs_plugin_config_defaults(struct gs_plugin_config *c)
{
	memset(c, 0, sizeof(*c));
	c->timeout_s = DEFAULT_TIMEOUT_S;
	c->leave_running = -1;
}

const char *gs_plugin_config_key(enum gs_plugin_key k)
{
	return (unsigned)k < GS_PK_COUNT ? KEY(k) : "?";
}

const char *gs_plugin_config_env_name(enum gs_plugin_key k)
{
	return (unsigned)k < GS_PK_COUNT ? ENV(k) : "?";
}

const char *gs_plugin_config_origin(const struct gs_plugin_config *c, enum gs_plugin_key k, char *buf, size_t n)
{
	if ((unsigned)k >= GS_PK_COUNT || !c->line[k])
		snprintf(buf, n, "the default");
	else if (c->line[k] < 0)
		snprintf(buf, n, "%s", ENV(k));
	else
		snprintf(buf, n, "%s in '%s' line %d", KEY(k), c->file, c->line[k]);
	return buf;
}

/* The form of a map: FROM=TO words (commas or blanks between), each side letters, digits or '-'. */
static int check_map(const char *v, const char **why)
{
	if (strlen(v) >= GS_PLUGIN_MAP_MAX) {
		*why = "is too long";
		return -1;
	}
	const char *p = v;
	int words = 0;
	while (*p) {
		while (*p == ',' || *p == ' ' || *p == '\t')
			p++;
		if (!*p)
			break;
		size_t from = 0, to = 0;
		int eq = 0;
		for (; *p && *p != ',' && *p != ' ' && *p != '\t'; p++) {
			if (*p == '=') {
				eq++;
				continue;
			}
			bool ok = (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
				  *p == '-';
			if (!ok) {
				*why = "holds a character that is not part of a GPU index or UUID";
				return -1;
			}
			if (eq)
				to++;
			else
				from++;
		}
		if (eq != 1 || !from || !to) {
			*why = "is not FROM=TO pairs (GPU indexes or UUIDs)";
			return -1;
		}
		words++;
	}
	if (!words) {
		*why = "names no pair";
		return -1;
	}
	return 0;
}

/* Sets key k from the text v; why says what is wrong with v. */
static int set_value(struct gs_plugin_config *c, enum gs_plugin_key k, const char *v, const char **why)
{
	switch (keys[k].type) {
	case T_MAP:
		if (check_map(v, why))
			return -1;
		snprintf(c->map, sizeof(c->map), "%s", v);
		return 0;
	case T_BOOL: {
		bool b;
		if (gs_parse_bool(v, &b)) {
			*why = "is not a yes or no (1, 0, yes, no, true, false, on, off)";
			return -1;
		}
		*(bool *)((char *)c + keys[k].field) = b;
		return 0;
	}
	case T_SECONDS:
		if (gs_parse_seconds(v, &c->timeout_s)) {
			*why = "is not a number of seconds (0 or more)";
			return -1;
		}
		return 0;
	case T_TRISTATE: {
		bool b;
		if (gs_parse_bool(v, &b)) {
			*why = "is not a yes or no (1, 0, yes, no, true, false, on, off)";
			return -1;
		}
		c->leave_running = b;
		return 0;
	}
	case T_COMPRESS: {
		struct gs_err e = { 0 };
		if (gs_compress_parse(v, &c->compress, &e)) {
			*why = "is not a codec: lz4 or zstd, with an optional :LEVEL (lz4 1-12, zstd 1-22), or none";
			return -1;
		}
		return 0;
	}
	}
	*why = "has an unknown type";
	return -1;
}

static int find_key(const char *name)
{
	for (int k = 0; k < GS_PK_COUNT; k++)
		if (!strcmp(KEY(k), name))
			return k;
	return -1;
}

static bool blank(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r';
}

int gs_plugin_config_parse(struct gs_plugin_config *c, const char *text, size_t len, const char *name,
			   struct gs_err *err)
{
	int seen[GS_PK_COUNT] = { 0 };
	char line[GS_PLUGIN_CONFIG_MAX_LINE + 1];
	size_t pos = 0;
	for (int no = 1; pos < len; no++) {
		size_t end = pos;
		while (end < len && text[end] != '\n')
			end++;
		size_t n = end - pos;
		if (memchr(text + pos, '\0', n))
			return gs_fail(err, GS_E_USAGE, "'%s' line %d holds a NUL byte: not a text file", name, no);
		if (n > GS_PLUGIN_CONFIG_MAX_LINE)
			return gs_fail(err, GS_E_USAGE, "'%s' line %d is longer than %d bytes", name, no,
				       GS_PLUGIN_CONFIG_MAX_LINE);
		memcpy(line, text + pos, n);
		line[n] = '\0';
		pos = end + 1;
		char *s = line;
		while (blank(*s))
			s++;
		char *e = s + strlen(s);
		while (e > s && blank(e[-1]))
			*--e = '\0';
		if (!*s || *s == '#')
			continue;
		char *eq = strchr(s, '=');
		if (!eq)
			return gs_fail(err, GS_E_USAGE, "'%s' line %d is not 'key = value': '%.64s'", name, no, s);
		char *v = eq + 1;
		while (blank(*v))
			v++;
		char *ke = eq;
		while (ke > s && blank(ke[-1]))
			ke--;
		*ke = '\0';
		if (!*s)
			return gs_fail(err, GS_E_USAGE, "'%s' line %d has no key before '='", name, no);
		int k = find_key(s);
		if (k < 0) {
			char keys_said[256] = "";
			for (int j = 0, len = 0; j < GS_PK_COUNT && len < (int)sizeof(keys_said); j++)
				len += snprintf(keys_said + len, sizeof(keys_said) - (size_t)len, "%s%s", j ? ", " : "", KEY(j));
			return gs_fail(err, GS_E_USAGE, "'%s' line %d: unknown key '%.64s' (keys: %s)", name, no, s,
				       keys_said);
		}
		if (seen[k])
			return gs_fail(err, GS_E_USAGE, "'%s' line %d: '%s' is set again (first on line %d)", name, no,
				       KEY(k), seen[k]);
		seen[k] = no;
		const char *why = NULL;
		if (set_value(c, (enum gs_plugin_key)k, v, &why))
			return gs_fail(err, GS_E_USAGE, "'%s' line %d: %s '%.64s' %s", name, no, KEY(k), v, why);
		c->line[k] = no;
	}
	return 0;
}

int gs_plugin_config_read(struct gs_plugin_config *c, const char *path, struct gs_err *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return gs_fail_errno(err, GS_E_USAGE, errno, "cannot open the plugin's configuration '%s'", path);
	struct stat st;
	int rc = 0;
	char *text = NULL;
	if (fstat(fd, &st))
		rc = gs_fail_errno(err, GS_E_USAGE, errno, "cannot stat the plugin's configuration '%s'", path);
	else if (!S_ISREG(st.st_mode))
		rc = gs_fail(err, GS_E_USAGE, "the plugin's configuration '%s' is not a regular file", path);
	else if ((st.st_uid != 0 && st.st_uid != geteuid()) || (st.st_mode & (S_IWGRP | S_IWOTH)))
		rc = gs_fail(err, GS_E_USAGE, "the plugin's configuration '%s' may be changed by another user (owner %u, "
			     "mode %03o): it must be root's and not writable by group or others", path,
			     (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777));
	else if (st.st_size > GS_PLUGIN_CONFIG_MAX_BYTES)
		rc = gs_fail(err, GS_E_USAGE, "the plugin's configuration '%s' is larger than %d bytes", path,
			     GS_PLUGIN_CONFIG_MAX_BYTES);
	else if (!(text = malloc((size_t)st.st_size + 1)))
		rc = gs_fail(err, GS_E_FAILURE, "out of memory");
	size_t got = 0;
	/* one byte more than the size said: a file that grew meanwhile is read to its limit, then refused */
	while (!rc) {
		ssize_t r = read(fd, text + got, (size_t)st.st_size + 1 - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			rc = gs_fail_errno(err, GS_E_USAGE, errno, "cannot read the plugin's configuration '%s'", path);
		else if (r == 0)
			break;
		else if ((got += (size_t)r) > (size_t)st.st_size)
			rc = gs_fail(err, GS_E_USAGE, "the plugin's configuration '%s' changed while it was read", path);
	}
	close(fd);
	if (!rc) {
		snprintf(c->file, sizeof(c->file), "%s", path);
		rc = gs_plugin_config_parse(c, text, got, path, err);
	}
	free(text);
	return rc;
}

int gs_plugin_config_env(struct gs_plugin_config *c, struct gs_err *err)
{
	for (int k = 0; k < GS_PK_COUNT; k++) {
		const char *v = gs_setting_raw(keys[k].id);
		if (!v || !*v)
			continue;
		const char *why = NULL;
		if (set_value(c, (enum gs_plugin_key)k, v, &why))
			return gs_fail(err, GS_E_USAGE, "%s='%.64s' %s", ENV(k), v, why);
		c->line[k] = -1;
	}
	return 0;
}

int gs_plugin_config_load(struct gs_plugin_config *c, const char *const *search, int nsearch, struct gs_err *err)
{
	gs_plugin_config_defaults(c);
	const char *named = gs_setting_raw(GS_S_PLUGIN_CONFIG);
	int rc = 0;
	if (named) {
		if (*named)
			rc = gs_plugin_config_read(c, named, err);
		if (rc)
			return gs_err_wrap(err, "GPUSNAP_PLUGIN_CONFIG");
	} else {
		for (int i = 0; i < nsearch; i++) {
			struct stat st;
			if (!search[i] || (stat(search[i], &st) && errno == ENOENT))
				continue;
			if ((rc = gs_plugin_config_read(c, search[i], err)))
				return rc;
			break;
		}
	}
	return gs_plugin_config_env(c, err);
}
