/*
 * test_settings.c - the settings table (common/settings.c): every row's
 * default parses, bad values are named in the one line users see, ranges
 * hold at their bounds, a command refuses only its own rows, and values are
 * read once.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/settings.h"
#include "core/plugin_config.h"
#include "test.h"

static void clear_env(void)
{
	for (int i = 0; i < GS_S_COUNT; i++)
		unsetenv(gs_setting_def((enum gs_setting_id)i)->name);
}

static void test_rows(void)
{
	for (int i = 0; i < GS_S_COUNT; i++) {
		const struct gs_setting_def *d = gs_setting_def((enum gs_setting_id)i);
		CHECK(d && d->name && !strncmp(d->name, "GPUSNAP_", 8));
		CHECK(d->doc && *d->doc && !strchr(d->doc, '\n'));
		CHECK(d->scope != 0);
		CHECK_INT(gs_setting_find(d->name, false), i);
		for (int j = 0; j < i; j++)
			CHECK(strcmp(d->name, gs_setting_def((enum gs_setting_id)j)->name));
		CHECK(d->type != GS_SET_ENUM || (d->choices && *d->choices));
		/* the default, where the row has one, is a good value */
		if (d->dflt) {
			union gs_setting_value v;
			char msg[256] = "";
			CHECK_INT(gs_setting_parse((enum gs_setting_id)i, d->dflt, &v, msg, sizeof(msg)), 0);
			CHECK_STR(msg, "");
		}
	}
	CHECK_INT(gs_setting_find("GPUSNAP_NOPE", false), -1);
	CHECK(gs_setting_def(GS_S_COUNT) == NULL);
}

/* The plugin's keys are rows, with their file key, read by the plugin (the command line may read one too), and its
 * defaults are the rows' */
static void test_plugin_keys(void)
{
	for (int k = 0; k < GS_PK_COUNT; k++) {
		int row = gs_setting_find(gs_plugin_config_env_name((enum gs_plugin_key)k), false);
		CHECK(row >= 0);
		CHECK_INT(gs_setting_find(gs_plugin_config_key((enum gs_plugin_key)k), true), row);
		CHECK(gs_setting_def((enum gs_setting_id)row)->scope & GS_SCOPE_PLUGIN);
	}
	struct gs_plugin_config c;
	gs_plugin_config_defaults(&c);
	CHECK(c.timeout_s == atof(gs_setting_def(GS_S_PLUGIN_TIMEOUT)->dflt));
	CHECK(!c.no_verify && !c.driver && !c.multi_gpu_driver && c.leave_running == -1);
	CHECK(gs_setting_def(GS_S_PLUGIN_LEAVE_RUNNING)->dflt == NULL);
}

static void bad(enum gs_setting_id id, const char *text, const char *want)
{
	union gs_setting_value v;
	char msg[256] = "";
	CHECK_INT(gs_setting_parse(id, text, &v, msg, sizeof(msg)), -1);
	CHECK_STR(msg, want);
}

static void test_messages(void)
{
	bad(GS_S_IO_THREADS, "x", "GPUSNAP_IO_THREADS='x' is not a number from 1 to 32");
	bad(GS_S_IO_THREADS, "4x", "GPUSNAP_IO_THREADS='4x' is not a number from 1 to 32");
	bad(GS_S_STAGING_THREADS, "", "GPUSNAP_STAGING_THREADS='' is not a number from 1 to 32");
	bad(GS_S_CHUNK_SIZE, "4Q", "GPUSNAP_CHUNK_SIZE='4Q' is not a size from 1M to 256M");
	bad(GS_S_RESERVE, "-1G", "GPUSNAP_RESERVE='-1G' is not a size (bytes, or with K, M, G or T)");
	bad(GS_S_CRIU_TIMEOUT, "soon", "GPUSNAP_CRIU_TIMEOUT='soon' is not a number of seconds > 0");
	bad(GS_S_PLUGIN_TIMEOUT, "-1", "GPUSNAP_PLUGIN_TIMEOUT='-1' is not a number of seconds (0 or more)");
	bad(GS_S_AGENT_HOOKS, "maybe", "GPUSNAP_AGENT_HOOKS='maybe' is not 0 or 1 (or no, yes, false, true, off, on)");
	bad(GS_S_HOST_COPY, "fast", "GPUSNAP_HOST_COPY='fast' is not one of auto, memcpy, stream");
	bad(GS_S_LOG, "loud", "GPUSNAP_LOG='loud' is not one of error, warn, info, debug");
	/* what the user typed is shown made printable: the line stays one line */
	bad(GS_S_LOG, "a\nb", "GPUSNAP_LOG='a?b' is not one of error, warn, info, debug");
	char longpath[5000];
	memset(longpath, 'a', sizeof(longpath) - 1);
	longpath[sizeof(longpath) - 1] = '\0';
	union gs_setting_value v;
	char msg[256];
	CHECK_INT(gs_setting_parse(GS_S_AGENT_LOG, longpath, &v, msg, sizeof(msg)), -1);
	CHECK_CONTAINS(msg, "is longer than a path may be");
}

static void good(enum gs_setting_id id, const char *text, union gs_setting_value *v)
{
	char msg[256] = "";
	CHECK_INT(gs_setting_parse(id, text, v, msg, sizeof(msg)), 0);
	CHECK_STR(msg, "");
}

static void test_bounds(void)
{
	union gs_setting_value v;
	good(GS_S_IO_THREADS, "1", &v);
	CHECK_INT(v.i, 1);
	good(GS_S_IO_THREADS, "32", &v);
	CHECK_INT(v.i, 32);
	bad(GS_S_IO_THREADS, "0", "GPUSNAP_IO_THREADS='0' is not a number from 1 to 32");
	bad(GS_S_IO_THREADS, "33", "GPUSNAP_IO_THREADS='33' is not a number from 1 to 32");
	good(GS_S_CHUNK_SIZE, "1M", &v);
	CHECK(v.size == 1u << 20);
	good(GS_S_CHUNK_SIZE, "256MiB", &v);
	CHECK(v.size == 256u << 20);
	bad(GS_S_CHUNK_SIZE, "1048575", "GPUSNAP_CHUNK_SIZE='1048575' is not a size from 1M to 256M");
	bad(GS_S_CHUNK_SIZE, "257M", "GPUSNAP_CHUNK_SIZE='257M' is not a size from 1M to 256M");
	good(GS_S_CRIU_TIMEOUT, "0.5", &v);
	CHECK(v.seconds == 0.5);
	bad(GS_S_CRIU_TIMEOUT, "0", "GPUSNAP_CRIU_TIMEOUT='0' is not a number of seconds > 0");
	good(GS_S_PLUGIN_TIMEOUT, "0", &v);
	CHECK(v.seconds == 0);
	good(GS_S_RESERVE, "40G", &v);
	CHECK(v.size == 40ull << 30);
	const char *yes[] = { "1", "yes", "TRUE", "on" }, *no[] = { "0", "no", "false", "Off" };
	for (int i = 0; i < 4; i++) {
		good(GS_S_RDMA, yes[i], &v);
		CHECK(v.b);
		good(GS_S_RDMA, no[i], &v);
		CHECK(!v.b);
	}
	good(GS_S_HOST_COPY, "stream", &v);
	CHECK_INT(v.choice, 2);
	good(GS_S_LOG, "DEBUG", &v); /* GPUSNAP_LOG was always read without case */
	CHECK_INT(v.choice, 3);
	/* a size or a share of the host's memory */
	good(GS_S_HOST_MEMORY_MARGIN, "2G", &v);
	good(GS_S_HOST_MEMORY_MARGIN, "0", &v);
	good(GS_S_HOST_MEMORY_MARGIN, "10%", &v);
	good(GS_S_HOST_MEMORY_MARGIN, "0%", &v);
	good(GS_S_HOST_MEMORY_MARGIN, "100%", &v);
	good(GS_S_HOST_MEMORY_MARGIN, "12.5%", &v);
	const char *margin_bad = "is not a size (bytes, or with K, M, G or T) or a share of the host's memory (0% to 100%)";
	const char *margins[] = { "101%", "-1%", "%", "x%", "10%%", "ten", "2Q", "" };
	for (size_t i = 0; i < sizeof(margins) / sizeof(*margins); i++) {
		char want[256];
		snprintf(want, sizeof(want), "GPUSNAP_HOST_MEMORY_MARGIN='%s' %s", margins[i], margin_bad);
		bad(GS_S_HOST_MEMORY_MARGIN, margins[i], want);
	}
}

static void test_load(void)
{
	clear_env();
	struct gs_err err = { 0 };
	CHECK_INT(gs_settings_load(GS_SETTINGS_COMMAND, &err), 0);
	/* unset: the defaults */
	CHECK(!gs_setting_is_set(GS_S_IO_THREADS));
	CHECK(gs_setting_bool(GS_S_AGENT_HOOKS));
	CHECK(!gs_setting_bool(GS_S_ALLOW_IO_URING));
	CHECK(gs_setting_seconds(GS_S_CRIU_TIMEOUT) == 600);
	CHECK_STR(gs_setting_str(GS_S_DEVICE_PATH_PREFIX), "/dev/nvidia");
	CHECK(gs_setting_str(GS_S_CRIU) == NULL);
	CHECK(gs_setting_raw(GS_S_PLUGIN_CONFIG) == NULL);
	/* empty: not set, but the raw text says it was there */
	setenv("GPUSNAP_CRIU", "", 1);
	setenv("GPUSNAP_PLUGIN_CONFIG", "", 1);
	setenv("GPUSNAP_IO_THREADS", "12", 1);
	CHECK_INT(gs_settings_load(GS_SETTINGS_COMMAND, &err), 0);
	CHECK(gs_setting_str(GS_S_CRIU) == NULL);
	CHECK_STR(gs_setting_raw(GS_S_PLUGIN_CONFIG), "");
	CHECK(gs_setting_is_set(GS_S_IO_THREADS));
	CHECK_INT(gs_setting_int(GS_S_IO_THREADS), 12);
	/* read once: setenv afterwards changes nothing until the next load */
	setenv("GPUSNAP_IO_THREADS", "3", 1);
	setenv("GPUSNAP_CRIU", "/x/criu", 1);
	CHECK_INT(gs_setting_int(GS_S_IO_THREADS), 12);
	CHECK(gs_setting_str(GS_S_CRIU) == NULL);
	CHECK_INT(gs_settings_load(GS_SETTINGS_COMMAND, &err), 0);
	CHECK_INT(gs_setting_int(GS_S_IO_THREADS), 3);
	CHECK_STR(gs_setting_str(GS_S_CRIU), "/x/criu");
	/* a command: a bad value of the agent's is not its to refuse; it gets the default */
	setenv("GPUSNAP_IO_THREADS", "lots", 1);
	CHECK_INT(gs_settings_load(GS_SETTINGS_COMMAND, &err), 0);
	CHECK(!gs_setting_is_set(GS_S_IO_THREADS));
	/* ... a bad value of its own is, with the one line */
	setenv("GPUSNAP_CRIU_TIMEOUT", "later", 1);
	CHECK_INT(gs_settings_load(GS_SETTINGS_COMMAND, &err), GS_E_USAGE);
	CHECK_STR(err.msg, "GPUSNAP_CRIU_TIMEOUT='later' is not a number of seconds > 0");
	/* the agent: never an error, the default */
	CHECK_INT(gs_settings_load(GS_SETTINGS_AGENT, NULL), 0);
	CHECK(gs_setting_seconds(GS_S_CRIU_TIMEOUT) == 600);
	/* the plugin's keys are parsed by plugin_config with its file, not here */
	setenv("GPUSNAP_PLUGIN_TIMEOUT", "soon", 1);
	clear_env();
	setenv("GPUSNAP_PLUGIN_TIMEOUT", "soon", 1);
	CHECK_INT(gs_settings_load(GS_SETTINGS_COMMAND, &err), 0);
	CHECK_STR(gs_setting_raw(GS_S_PLUGIN_TIMEOUT), "soon");
	struct gs_plugin_config c;
	CHECK_INT(gs_plugin_config_load(&c, NULL, 0, &err), GS_E_USAGE);
	CHECK_CONTAINS(err.msg, "GPUSNAP_PLUGIN_TIMEOUT='soon' is not a number of seconds");
	clear_env();
	gs_settings_load(GS_SETTINGS_AGENT, NULL);
}

static void test_markdown(void)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	gs_settings_markdown(f);
	fclose(f);
	CHECK(buf && !strncmp(buf, "| Variable |", 12));
	CHECK_CONTAINS(buf, "| `GPUSNAP_IO_THREADS` |  | a number from 1 to 32 |  | agent |");
	CHECK_CONTAINS(buf, "| `GPUSNAP_PLUGIN_MAP` | `map` |");
	CHECK(!strstr(buf, "GPUSNAP_FAULT")); /* hidden: tests only */
	free(buf);
}

int main(void)
{
	RUN(test_rows);
	RUN(test_plugin_keys);
	RUN(test_messages);
	RUN(test_bounds);
	RUN(test_load);
	RUN(test_markdown);
	return TEST_SUMMARY();
}
