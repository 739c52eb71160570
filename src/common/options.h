/*
 * options.h - table-driven command-line option parsing (git's parse-options idea).
 *
 * Each subcommand declares its options once in a table; the same table drives
 * parsing, `-h` output and the usage shown on a usage error. Usage errors are
 * reported through gs_err with GS_E_USAGE.
 */
#ifndef GPUSNAP_COMMON_OPTIONS_H
#define GPUSNAP_COMMON_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "common/err.h"

enum gs_opt_type {
	GS_OPT_END = 0,
	GS_OPT_BOOL,        /* bool *: set to true */
	GS_OPT_STRING,      /* const char **: the argument */
	GS_OPT_INT,         /* int *: a decimal integer */
	GS_OPT_SECONDS,     /* double *: seconds, >= 0, fractions allowed */
	GS_OPT_SIZE,        /* uint64_t *: bytes, with optional K/M/G/T suffix (powers of 1024) */
	GS_OPT_STRING_LIST, /* struct gs_string_list *: each occurrence appended */
};

struct gs_option {
	enum gs_opt_type type;
	char short_name;       /* 0 if none */
	const char *long_name; /* NULL if none */
	void *value;
	const char *argh; /* argument placeholder for usage ("SECONDS") */
	const char *help;
};

struct gs_string_list {
	const char **items;
	int count;
};

#define GS_OPT_BOOL_(s, l, v, h) { GS_OPT_BOOL, (s), (l), (v), NULL, (h) }
#define GS_OPT_STRING_(s, l, v, a, h) { GS_OPT_STRING, (s), (l), (v), (a), (h) }
#define GS_OPT_INT_(s, l, v, a, h) { GS_OPT_INT, (s), (l), (v), (a), (h) }
#define GS_OPT_SECONDS_(s, l, v, a, h) { GS_OPT_SECONDS, (s), (l), (v), (a), (h) }
#define GS_OPT_SIZE_(s, l, v, a, h) { GS_OPT_SIZE, (s), (l), (v), (a), (h) }
#define GS_OPT_LIST_(s, l, v, a, h) { GS_OPT_STRING_LIST, (s), (l), (v), (a), (h) }
#define GS_OPT_END_() { GS_OPT_END, 0, NULL, NULL, NULL, NULL }

enum gs_parse_flags {
	GS_PARSE_STOP_AT_NON_OPTION = 1, /* for `run CMD ARGS`: CMD's own options are not ours */
};

/* Result of gs_parse_options besides an error code. */
enum { GS_PARSE_HELP = -1 };

/*
 * Parses argv[1..argc-1] (argv[0] is the subcommand name). Positional arguments
 * are moved to the front of argv; *nargs receives their count. Returns 0,
 * GS_PARSE_HELP after `-h`/`--help` (usage printed to stdout), or GS_E_USAGE
 * with err set. List values are allocated; free with gs_string_list_free.
 */
int gs_parse_options(int argc, char **argv, const struct gs_option *opts, int flags, int *nargs, struct gs_err *err);
void gs_print_usage(FILE *out, const char *const *usage, const struct gs_option *opts);
void gs_string_list_free(struct gs_string_list *l);

/*
 * Value parsers, shared with other input (config, env). Return 0 or -1.
 * Plain decimal only: digits (an int may have a '-' in front, seconds a
 * fraction "1.5", a size a suffix "40G", "512MiB"); white space, '+', hex,
 * exponents, inf and nan are refused like any other malformed number.
 */
int gs_parse_size(const char *s, uint64_t *out);
int gs_parse_seconds(const char *s, double *out);
int gs_parse_int(const char *s, int *out);
/* A yes or no: 1, 0, yes, no, true, false, on, off, in any case (the env's and the plugin file's). */
int gs_parse_bool(const char *s, bool *out);

#endif
