/*
 * fuzz_criu_log.c - libFuzzer harness for the text CRIU gives gpusnap
 * (src/criu/criu_text.c): `criu --version` output, its logs (the first real
 * error, a PID already in use) and the recorded dump flags a restore repeats.
 *
 * Input: one byte choosing a small output buffer size, then the text (a
 * NUL is appended; a NUL inside ends the text early, as it would for the C
 * string the real callers pass).
 *
 * Properties: a parsed version is non-negative; the error line found is one
 * line, NUL-terminated inside the buffer, the same whatever the buffer size
 * (truncated to it); a PID said to be in use is positive and is the one the
 * log names; the restore command line is a NULL-terminated list of strings.
 */
#include <string.h>

#include "criu/criu.h"
#include "fuzz.h"

#define BIG 600

static void check_version(const char *text)
{
	int ma = -1, mi = -1, pa = -1;
	if (gs_criu_parse_version(text, &ma, &mi, &pa) == 0)
		FUZZ_ASSERT(ma >= 0 && mi >= 0 && pa >= 0);
}

static void check_log_error(const char *text, size_t small)
{
	char big[BIG], little[BIG];
	memset(big, 'x', sizeof(big));
	memset(little, 'x', sizeof(little));
	int rc_big = gs_criu_log_error(text, big, sizeof(big));
	int rc_little = gs_criu_log_error(text, little, small);
	FUZZ_ASSERT(memchr(big, '\0', sizeof(big)) && memchr(little, '\0', small));
	FUZZ_ASSERT(rc_big == rc_little);
	if (rc_big) {
		FUZZ_ASSERT(big[0] == '\0' && little[0] == '\0');
		return;
	}
	FUZZ_ASSERT(big[0] != '\0' && !strchr(big, '\n'));
	FUZZ_ASSERT(strlen(little) == (strlen(big) < small - 1 ? strlen(big) : small - 1));
	FUZZ_ASSERT(!strncmp(big, little, strlen(little)));
}

static void check_pid_in_use(const char *text)
{
	pid_t pid = gs_criu_log_pid_in_use(text);
	if (pid == -1)
		return;
	FUZZ_ASSERT(pid > 0);
	/* Some "Can't fork for N: File exists" of the text names exactly this PID (not one that wraps to it). */
	static const char line[] = "Can't fork for ";
	int named = 0;
	for (const char *p = text; !named && (p = strstr(p, line)); p++) {
		const char *d = p + strlen(line);
		long long v = 0;
		while (*d >= '0' && *d <= '9' && v <= (long long)1 << 40)
			v = v * 10 + (*d++ - '0');
		named = d > p + strlen(line) && v == pid && !strncmp(d, ": File exists", 13);
	}
	FUZZ_ASSERT(named);
}

static void check_restore_args(const char *recorded)
{
	struct gs_criu c = { 0 };
	snprintf(c.path, sizeof(c.path), "%s", "/usr/sbin/criu");
	struct gs_argv argv = { 0 };
	struct gs_err err = { 0 };
	struct gs_criu_restore_opts o = { 0 };
	if (gs_criu_restore_args(&c, "/img/cpu", "/img/restore.log", "/img/restore.pid", &o, recorded, &argv,
				 &err) == 0) {
		FUZZ_ASSERT(argv.n >= 2 && argv.v[argv.n] == NULL);
		for (size_t i = 0; i < argv.n; i++)
			FUZZ_ASSERT(argv.v[i] && argv.v[i][0]);
	}
	gs_argv_free(&argv);
}

void fuzz_one(uint8_t size_byte, const uint8_t *rest, size_t len)
{
	size_t small = 1 + size_byte % 80;
	char *text = fuzz_text(rest, len);
	check_version(text);
	check_log_error(text, small);
	check_pid_in_use(text);
	check_restore_args(text);
	free(text);
}
