/*
 * test_plugin_config.c - unit tests of src/core/plugin_config.c, the CRIU
 * plugin's settings: the file's syntax, each key's values, the environment
 * over the file, which file is read, the file's trust checks, and a set of
 * malformed inputs (every one refused with one line naming file and line,
 * none crashing or half-applied past its error).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/plugin_config.h"
#include "test.h"
#include "common/settings.h"

static const char *const env_names[] = { "GPUSNAP_PLUGIN_MAP", "GPUSNAP_PLUGIN_NO_VERIFY", "GPUSNAP_PLUGIN_DRIVER",
					 "GPUSNAP_PLUGIN_TIMEOUT", "GPUSNAP_PLUGIN_LEAVE_RUNNING", "GPUSNAP_PLUGIN_COMPRESS",
					 "GPUSNAP_MULTI_GPU_DRIVER",
					 "GPUSNAP_PLUGIN_CONFIG" };

static void clear_env(void)
{
	for (size_t i = 0; i < sizeof(env_names) / sizeof(env_names[0]); i++)
		unsetenv(env_names[i]);
	gs_settings_load(GS_SETTINGS_AGENT, NULL); /* the environment is read once */
}

static int parse(struct gs_plugin_config *c, const char *text, struct gs_err *err)
{
	gs_plugin_config_defaults(c);
	memset(err, 0, sizeof(*err));
	return gs_plugin_config_parse(c, text, strlen(text), "f.conf", err);
}

static char dir[] = "/tmp/gs-plugin-config-XXXXXX";

static const char *write_file(const char *name, const char *text, mode_t mode)
{
	static char path[512];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	unlink(path);
	FILE *f = fopen(path, "w");
	if (!f)
		return NULL;
	fputs(text, f);
	fclose(f);
	chmod(path, mode);
	return path;
}

static void test_defaults(void)
{
	struct gs_plugin_config c;
	gs_plugin_config_defaults(&c);
	CHECK_STR(c.map, "");
	CHECK(!c.no_verify && !c.driver);
	CHECK(c.timeout_s == 30.0);
	CHECK_INT(c.leave_running, -1);
	char buf[128];
	CHECK_STR(gs_plugin_config_origin(&c, GS_PK_MAP, buf, sizeof(buf)), "the default");
	CHECK_STR(gs_plugin_config_key(GS_PK_NO_VERIFY), "no_verify");
	CHECK_STR(gs_plugin_config_env_name(GS_PK_LEAVE_RUNNING), "GPUSNAP_PLUGIN_LEAVE_RUNNING");
}

static void test_every_key(void)
{
	struct gs_plugin_config c;
	struct gs_err err;
	const char *text = "# gpusnap_criu.so\n"
			   "\n"
			   "map = 0=1, 1=0\n"
			   "  no_verify=yes  \n"
			   "driver = On\r\n"
			   "\ttimeout =  2.5\n"
			   "leave_running = false\n"
			   "   # indented comment";
	CHECK_INT(parse(&c, text, &err), 0);
	CHECK_STR(c.map, "0=1, 1=0");
	CHECK(c.no_verify);
	CHECK(c.driver);
	CHECK(c.timeout_s == 2.5);
	CHECK_INT(c.leave_running, 0);
	CHECK_INT(c.line[GS_PK_MAP], 3);
	CHECK_INT(c.line[GS_PK_LEAVE_RUNNING], 7);
	snprintf(c.file, sizeof(c.file), "f.conf");
	char buf[128];
	CHECK_STR(gs_plugin_config_origin(&c, GS_PK_TIMEOUT, buf, sizeof(buf)), "timeout in 'f.conf' line 6");
	/* UUIDs, a lone pair, a timeout of 0 (no limit), leave_running on */
	CHECK_INT(parse(&c, "map=GPU-8f3a2b1c-0000-4000-8000-00000000abcd=1\ntimeout=0\nleave_running=1\n", &err), 0);
	CHECK_STR(c.map, "GPU-8f3a2b1c-0000-4000-8000-00000000abcd=1");
	CHECK(c.timeout_s == 0);
	CHECK_INT(c.leave_running, 1);
	/* the agents' compression, as dump --compress: a codec, a level, or none */
	CHECK_INT(parse(&c, "compress = zstd:9\nmulti_gpu_driver = yes\n", &err), 0);
	CHECK_INT(c.compress.codec, GS_CODEC_ZSTD);
	CHECK_INT(c.compress.level, 9);
	CHECK(c.multi_gpu_driver);
	CHECK_INT(parse(&c, "compress = lz4\n", &err), 0);
	CHECK_INT(c.compress.codec, GS_CODEC_LZ4);
	CHECK_INT(parse(&c, "compress = none\n", &err), 0);
	CHECK_INT(c.compress.codec, GS_CODEC_NONE);
	/* an empty file and one of comments only change nothing */
	CHECK_INT(parse(&c, "", &err), 0);
	CHECK_INT(parse(&c, "#\n# x = y\n\n   \n", &err), 0);
	CHECK_INT(c.leave_running, -1);
}

/* The example of README.md ("Containers: the CRIU plugin") as it is written there. */
static void test_readme_example(void)
{
	struct gs_plugin_config c;
	struct gs_err err;
	CHECK_INT(parse(&c,
			"# restore: the GPU map, as gpusnap restore --map\n"
			"map = 0=1, 1=0\n"
			"# restore: yes skips the checksum pass\n"
			"no_verify = no\n"
			"# dump: yes takes the driver path even where the agent runs\n"
			"driver = no\n"
			"# dump: seconds to wait for running GPU work, 0 = no limit\n"
			"timeout = 30\n",
			&err),
		  0);
	CHECK_STR(c.map, "0=1, 1=0");
	CHECK(!c.no_verify && !c.driver && c.timeout_s == 30);
}

/* Each malformed input: refused, GS_E_USAGE, one line naming the file, and what it says. */
static void test_malformed(void)
{
	static const struct {
		const char *text;
		const char *says;
	} bad[] = {
		{ "colour = blue\n", "line 1: unknown key 'colour'" },
		{ "colour = blue\n", "(keys: map, no_verify, driver, timeout, leave_running, multi_gpu_driver, compress)" },
		{ "compress = gzip\n", "line 1: compress 'gzip' is not a codec: lz4 or zstd" },
		{ "compress = zstd:99\n", "compress 'zstd:99' is not a codec" },
		{ "Timeout = 5\n", "unknown key 'Timeout'" },
		{ "map 0=1\n", "line 1: unknown key 'map 0'" },
		{ "\n\nno_verify\n", "line 3 is not 'key = value'" },
		{ "= 1\n", "no key before '='" },
		{ "timeout = soon\n", "timeout 'soon' is not a number of seconds" },
		{ "timeout = -1\n", "is not a number of seconds" },
		{ "timeout = 30 # half a minute\n", "is not a number of seconds" },
		{ "timeout = nan\n", "is not a number of seconds" },
		{ "timeout = inf\n", "is not a number of seconds" },
		{ "timeout = 0x10\n", "timeout '0x10' is not a number of seconds" },
		{ "timeout = 1e3\n", "is not a number of seconds" },
		{ "timeout =\n", "is not a number of seconds" },
		{ "no_verify = 2\n", "no_verify '2' is not a yes or no" },
		{ "driver =\n", "is not a yes or no" },
		{ "leave_running = maybe\n", "is not a yes or no" },
		{ "map =\n", "names no pair" },
		{ "map = 0\n", "is not FROM=TO pairs" },
		{ "map = 0=1=2\n", "is not FROM=TO pairs" },
		{ "map = =1\n", "is not FROM=TO pairs" },
		{ "map = 0=\n", "is not FROM=TO pairs" },
		{ "map = 0=1;rm\n", "not part of a GPU index or UUID" },
		{ "map = 0=1 , ,\n", NULL }, /* extra separators are fine: below */
		{ "timeout = 1\ntimeout = 2\n", "line 2: 'timeout' is set again (first on line 1)" },
		{ "driver = 1\nx\x01y = 2\n", "unknown key" },
		{ "key = \xff\xfe\n", "unknown key 'key'" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct gs_plugin_config c;
		struct gs_err err;
		int rc = parse(&c, bad[i].text, &err);
		if (!bad[i].says) {
			CHECK_INT(rc, 0);
			continue;
		}
		if (rc != GS_E_USAGE)
			fprintf(stderr, "input %zu: '%s' gave %d\n", i, bad[i].text, rc);
		CHECK_INT(rc, GS_E_USAGE);
		CHECK_CONTAINS(err.msg, "'f.conf' line ");
		CHECK_CONTAINS(err.msg, bad[i].says);
		CHECK(!strchr(err.msg, '\n'));
	}
	/* a NUL byte inside, a line too long, a long map: refused (lengths given, not strlen) */
	struct gs_plugin_config c;
	struct gs_err err = { 0 };
	gs_plugin_config_defaults(&c);
	CHECK_INT(gs_plugin_config_parse(&c, "driver = 1\0\n", 12, "f.conf", &err), GS_E_USAGE);
	CHECK_CONTAINS(err.msg, "line 1 holds a NUL byte");
	size_t n = GS_PLUGIN_CONFIG_MAX_LINE + 10;
	char *long_line = malloc(n + 1);
	memset(long_line, ' ', n);
	memcpy(long_line, "driver = 1", 10);
	long_line[n] = '\0';
	CHECK_INT(gs_plugin_config_parse(&c, long_line, n, "f.conf", &err), GS_E_USAGE);
	CHECK_CONTAINS(err.msg, "line 1 is longer than");
	memset(long_line, '1', n);
	memcpy(long_line, "map = 0=", 8);
	CHECK_INT(gs_plugin_config_parse(&c, long_line, GS_PLUGIN_CONFIG_MAX_LINE - 1, "f.conf", &err), GS_E_USAGE);
	CHECK_CONTAINS(err.msg, "is too long");
	free(long_line);
}

/* Random bytes and random mixes of valid pieces: never a crash, a result of 0 or one line naming the file. */
static void test_random_inputs(void)
{
	static const char *const pieces[] = { "map", "no_verify", "driver", "timeout", "leave_running", "=", " ",
					      "\t", "\n", "\r\n", "#", "0", "1", "yes", "0=1", ",", "GPU-ab", "-",
					      "2.5", "x", "\0", "\xff", "==", "inf" };
	unsigned seed = 12345;
	char buf[512];
	for (int round = 0; round < 20000; round++) {
		size_t len = 0;
		if (round % 2) {
			while (len < sizeof(buf) - 16) {
				seed = seed * 1103515245 + 12345;
				const char *p = pieces[(seed >> 16) % (sizeof(pieces) / sizeof(pieces[0]))];
				size_t pl = *p ? strlen(p) : 1;
				memcpy(buf + len, p, pl);
				len += pl;
				if (((seed >> 8) & 15) == 0)
					break;
			}
		} else {
			seed = seed * 1103515245 + 12345;
			len = (seed >> 16) % sizeof(buf);
			for (size_t i = 0; i < len; i++) {
				seed = seed * 1103515245 + 12345;
				buf[i] = (char)(seed >> 16);
			}
		}
		struct gs_plugin_config c;
		struct gs_err err = { 0 };
		gs_plugin_config_defaults(&c);
		int rc = gs_plugin_config_parse(&c, buf, len, "r.conf", &err);
		if (rc) {
			CHECK_INT(rc, GS_E_USAGE);
			CHECK(!strncmp(err.msg, "'r.conf' line ", 14));
			CHECK(!strchr(err.msg, '\n'));
		} else {
			CHECK(c.timeout_s >= 0);
			CHECK(c.leave_running >= -1 && c.leave_running <= 1);
			CHECK(strlen(c.map) < sizeof(c.map));
		}
		if (test_current_failed) {
			fprintf(stderr, "round %d failed\n", round);
			break;
		}
	}
}

static void test_environment_wins(void)
{
	clear_env();
	const char *path = write_file("a.conf", "map = 0=3\ntimeout = 5\nno_verify = 1\n", 0644);
	setenv("GPUSNAP_PLUGIN_CONFIG", path, 1);
	setenv("GPUSNAP_PLUGIN_MAP", "0=1", 1);
	setenv("GPUSNAP_PLUGIN_NO_VERIFY", "", 1); /* empty: not set */
	setenv("GPUSNAP_PLUGIN_LEAVE_RUNNING", "yes", 1);
	gs_settings_load(GS_SETTINGS_AGENT, NULL); /* the environment is read once */
	struct gs_plugin_config c;
	struct gs_err err = { 0 };
	CHECK_INT(gs_plugin_config_load(&c, NULL, 0, &err), 0);
	CHECK_STR(c.map, "0=1");
	CHECK(c.timeout_s == 5);
	CHECK(c.no_verify);
	CHECK_INT(c.leave_running, 1);
	CHECK_STR(c.file, path);
	char buf[256];
	CHECK_STR(gs_plugin_config_origin(&c, GS_PK_MAP, buf, sizeof(buf)), "GPUSNAP_PLUGIN_MAP");
	/* a bad value in the environment is refused too, naming the variable */
	setenv("GPUSNAP_PLUGIN_TIMEOUT", "soon", 1);
	gs_settings_load(GS_SETTINGS_AGENT, NULL); /* the environment is read once */
	CHECK_INT(gs_plugin_config_load(&c, NULL, 0, &err), GS_E_USAGE);
	CHECK_CONTAINS(err.msg, "GPUSNAP_PLUGIN_TIMEOUT='soon' is not a number of seconds");
	/* numbers strtod would take but nobody writes: white space in front, hex, an exponent */
	static const char *const odd[] = { " 5", "0x10", "1e1", "+5", "5 " };
	for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
		setenv("GPUSNAP_PLUGIN_TIMEOUT", odd[i], 1);
		CHECK_INT(gs_plugin_config_load(&c, NULL, 0, &err), GS_E_USAGE);
		CHECK_CONTAINS(err.msg, "is not a number of seconds");
	}
	clear_env();
}

static void test_which_file(void)
{
	clear_env();
	char first[512], second[512];
	snprintf(first, sizeof(first), "%s", write_file("first.conf", "timeout = 1\n", 0644));
	snprintf(second, sizeof(second), "%s", write_file("second.conf", "timeout = 2\n", 0600));
	char missing[512];
	snprintf(missing, sizeof(missing), "%s/missing.conf", dir);
	struct gs_plugin_config c;
	struct gs_err err = { 0 };
	/* the first that exists, only that one */
	const char *search[] = { missing, second, first };
	CHECK_INT(gs_plugin_config_load(&c, search, 3, &err), 0);
	CHECK(c.timeout_s == 2);
	CHECK_STR(c.file, second);
	/* none exists: the defaults */
	const char *none[] = { missing };
	CHECK_INT(gs_plugin_config_load(&c, none, 1, &err), 0);
	CHECK(c.timeout_s == 30);
	CHECK_STR(c.file, "");
	/* GPUSNAP_PLUGIN_CONFIG wins over the search, must exist; empty: no file at all */
	setenv("GPUSNAP_PLUGIN_CONFIG", first, 1);
	gs_settings_load(GS_SETTINGS_AGENT, NULL); /* the environment is read once */
	CHECK_INT(gs_plugin_config_load(&c, search, 3, &err), 0);
	CHECK(c.timeout_s == 1);
	setenv("GPUSNAP_PLUGIN_CONFIG", missing, 1);
	gs_settings_load(GS_SETTINGS_AGENT, NULL); /* the environment is read once */
	CHECK_INT(gs_plugin_config_load(&c, search, 3, &err), GS_E_USAGE);
	CHECK_CONTAINS(err.msg, "GPUSNAP_PLUGIN_CONFIG: cannot open the plugin's configuration");
	CHECK_CONTAINS(err.msg, "missing.conf");
	setenv("GPUSNAP_PLUGIN_CONFIG", "", 1);
	gs_settings_load(GS_SETTINGS_AGENT, NULL); /* the environment is read once */
	CHECK_INT(gs_plugin_config_load(&c, search, 3, &err), 0);
	CHECK(c.timeout_s == 30);
	clear_env();
	/* a bad file found by the search is an error, not skipped */
	const char *bad = write_file("bad.conf", "timeout = 1\nbogus = 1\n", 0644);
	const char *with_bad[] = { bad, first };
	CHECK_INT(gs_plugin_config_load(&c, with_bad, 2, &err), GS_E_USAGE);
	CHECK_CONTAINS(err.msg, "bad.conf' line 2: unknown key 'bogus'");
}

static void test_file_trust(void)
{
	clear_env();
	struct gs_plugin_config c;
	struct gs_err err = { 0 };
	gs_plugin_config_defaults(&c);
	const char *p = write_file("open.conf", "timeout = 1\n", 0666);
	CHECK_INT(gs_plugin_config_read(&c, p, &err), GS_E_USAGE);
	CHECK_CONTAINS(err.msg, "may be changed by another user");
	CHECK(c.timeout_s == 30);
	p = write_file("group.conf", "timeout = 1\n", 0664);
	CHECK_INT(gs_plugin_config_read(&c, p, &err), GS_E_USAGE);
	CHECK_CONTAINS(err.msg, "not writable by group or others");
	CHECK_INT(gs_plugin_config_read(&c, dir, &err), GS_E_USAGE);
	CHECK_CONTAINS(err.msg, "is not a regular file");
	/* a file over the limit */
	char big[512];
	snprintf(big, sizeof(big), "%s/big.conf", dir);
	FILE *f = fopen(big, "w");
	for (int i = 0; f && i < GS_PLUGIN_CONFIG_MAX_BYTES / 8 + 1; i++)
		fputs("#comment\n", f);
	if (f)
		fclose(f);
	chmod(big, 0644);
	CHECK_INT(gs_plugin_config_read(&c, big, &err), GS_E_USAGE);
	CHECK_CONTAINS(err.msg, "is larger than");
	/* a link to a good file is followed */
	const char *good = write_file("good.conf", "driver = 1\n", 0644);
	char link[512];
	snprintf(link, sizeof(link), "%s/link.conf", dir);
	CHECK_INT(symlink(good, link), 0);
	CHECK_INT(gs_plugin_config_read(&c, link, &err), 0);
	CHECK(c.driver);
}

int main(void)
{
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	RUN(test_defaults);
	RUN(test_every_key);
	RUN(test_readme_example);
	RUN(test_malformed);
	RUN(test_random_inputs);
	RUN(test_environment_wins);
	RUN(test_which_file);
	RUN(test_file_trust);
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd))
		fprintf(stderr, "could not remove %s\n", dir);
	return TEST_SUMMARY();
}
