/*
 * fuzz_options.c - libFuzzer harness for option parsing (src/common/options.c):
 * the table parser every subcommand uses and the value parsers it shares
 * with other input (gs_parse_size, gs_parse_seconds, gs_parse_int), plus the
 * GPUSNAP_FAULT spec parser (src/common/fault.c), which reads the
 * environment the same way.
 *
 * Input: one flags byte, then arguments separated by NUL bytes (argv[0] is
 * the subcommand's name, as the CLI passes it). Flag bit 0 parses with
 * GS_PARSE_STOP_AT_NON_OPTION (as `gpusnap run` does).
 *
 * Properties: parsing returns 0, GS_PARSE_HELP or GS_E_USAGE with a one-line
 * message; positional arguments are a subset of the input in order; a size
 * that parses is exact (printed in bytes it parses to the same value);
 * seconds that parse are finite and >= 0; every number that parses is plain
 * decimal (starts with a digit, or '-' and a digit for an int; no hex, no
 * exponent, no white space).
 */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "common/fault.h"
#include "common/options.h"
#include "fuzz.h"

#define MAX_ARGS 64

static bool digit(char c)
{
	return c >= '0' && c <= '9';
}

/* Only digits, and a '.' where fraction: what a plain decimal number is made of (a size's suffix aside). */
static bool plain(const char *s, bool fraction)
{
	for (; *s; s++)
		if (!digit(*s) && !(fraction && *s == '.'))
			return false;
	return true;
}

static void check_values(const char *s)
{
	uint64_t size;
	if (gs_parse_size(s, &size) == 0) {
		char again[32];
		uint64_t back;
		snprintf(again, sizeof(again), "%llu", (unsigned long long)size);
		FUZZ_ASSERT(gs_parse_size(again, &back) == 0 && back == size);
		FUZZ_ASSERT(digit(s[0]) && !strpbrk(s, " \t\n\v\f\rxX+-"));
	}
	double secs;
	if (gs_parse_seconds(s, &secs) == 0)
		FUZZ_ASSERT(isfinite(secs) && secs >= 0 && digit(s[0]) && plain(s, true));
	int i;
	if (gs_parse_int(s, &i) == 0)
		FUZZ_ASSERT((digit(s[0]) && plain(s, false)) || (s[0] == '-' && digit(s[1]) && plain(s + 1, false)));
}

static void check_table(int argc, char **argv, int flags)
{
	bool verbose = false, quiet = false;
	const char *image = NULL;
	int jobs = -1;
	double timeout = -1;
	uint64_t reserve = 0;
	struct gs_string_list extra = { 0 };
	const struct gs_option opts[] = {
		GS_OPT_BOOL_('v', "verbose", &verbose, "say more"),
		GS_OPT_BOOL_('q', NULL, &quiet, "say less"),
		GS_OPT_STRING_('i', "image", &image, "DIR", "image directory"),
		GS_OPT_INT_('j', "jobs", &jobs, "N", "threads"),
		GS_OPT_SECONDS_('t', "timeout", &timeout, "SECONDS", "time limit"),
		GS_OPT_SIZE_(0, "reserve", &reserve, "SIZE", "staging memory"),
		GS_OPT_LIST_('x', "criu-arg", &extra, "ARG", "extra argument"),
		GS_OPT_END_(),
	};
	char *before[MAX_ARGS + 1];
	memcpy(before, argv, sizeof(char *) * (size_t)(argc + 1));
	int nargs = -1;
	struct gs_err err = { 0 };
	int rc = gs_parse_options(argc, argv, opts, flags, &nargs, &err);
	if (rc == 0) {
		FUZZ_ASSERT(nargs >= 0 && nargs < argc);
		/* positional arguments keep their order and come from the input */
		int k = 1;
		for (int p = 0; p < nargs; p++) {
			while (k < argc && before[k] != argv[p])
				k++;
			FUZZ_ASSERT(k < argc);
			k++;
		}
		if (timeout != -1)
			FUZZ_ASSERT(isfinite(timeout) && timeout >= 0);
		FUZZ_ASSERT(extra.count >= 0 && extra.count < argc);
		for (int e = 0; e < extra.count; e++)
			FUZZ_ASSERT(extra.items[e] != NULL);
	} else if (rc != GS_PARSE_HELP) {
		FUZZ_ASSERT(rc == GS_E_USAGE && err.code == GS_E_USAGE);
		FUZZ_ASSERT(err.msg[0] && !strchr(err.msg, '\n'));
	}
	gs_string_list_free(&extra);
}

void fuzz_one(uint8_t first, const uint8_t *rest, size_t len)
{
	int flags = (first & 1) ? GS_PARSE_STOP_AT_NON_OPTION : 0;
	char *text = fuzz_text(rest, len);
	char *argv[MAX_ARGS + 1];
	int argc = 0;
	argv[argc++] = "cmd";
	for (char *p = text; p < text + len && argc < MAX_ARGS; p += strlen(p) + 1)
		argv[argc++] = p;
	argv[argc] = NULL;
	for (int i = 1; i < argc; i++)
		check_values(argv[i]);
	check_table(argc, argv, flags);
	/* The first argument as a GPUSNAP_FAULT spec; the counters it sets are reset for the next input. */
	if (argc > 1)
		FUZZ_ASSERT(gs_fault_configure(argv[1]) >= 0);
	gs_fault_configure("");
	free(text);
}
