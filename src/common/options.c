/*
 * options.c - table-driven option parsing and usage output (see options.h).
 */
#include "common/options.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/printable.h"
/*
 * Where the plain decimal number that s starts with ends: an optional '-'
 * (minus), digits and (fraction) a '.' with more digits; NULL where s does
 * not start with one. What strtol and strtod take besides (white space in
 * front, '+', hex, exponents, inf, nan) is not a number a user means here,
 * so it is refused before they see it.
 */
static const char *decimal_end(const char *s, bool minus, bool fraction)
{
	const char *p = s;
	if (minus && *p == '-')
		p++;
	size_t digits = 0;
	for (; *p >= '0' && *p <= '9'; p++)
		digits++;
	if (fraction && *p == '.' && digits)
		for (p++; *p >= '0' && *p <= '9'; p++)
			;
	return digits ? p : NULL;
}

int gs_parse_int(const char *s, int *out)
{
	const char *e = decimal_end(s, true, false);
	if (!e || *e)
		return -1;
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < INT_MIN || v > INT_MAX)
		return -1;
	*out = (int)v;
	return 0;
}

int gs_parse_bool(const char *v, bool *out)
{
	static const char *const yes[] = { "1", "yes", "true", "on" }, *const no[] = { "0", "no", "false", "off" };
	for (size_t i = 0; i < 4; i++) {
		if (!strcasecmp(v, yes[i])) {
			*out = true;
			return 0;
		}
		if (!strcasecmp(v, no[i])) {
			*out = false;
			return 0;
		}
	}
	return -1;
}

int gs_parse_seconds(const char *s, double *out)
{
	const char *e = decimal_end(s, false, true);
	if (!e || *e)
		return -1;
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !isfinite(v) || v < 0)
		return -1;
	*out = v;
	return 0;
}

int gs_parse_size(const char *s, uint64_t *out)
{
	char *end;
	if (!decimal_end(s, false, false))
		return -1;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -1;
	unsigned shift = 0;
	switch (*end) {
	case '\0': break;
	case 'k': case 'K': shift = 10; break;
	case 'm': case 'M': shift = 20; break;
	case 'g': case 'G': shift = 30; break;
	case 't': case 'T': shift = 40; break;
	default: return -1;
	}
	if (*end) {
		end++;
		if (*end == 'i' && end[1] == 'B')
			end += 2;
		else if (*end == 'B')
			end++;
	}
	if (*end)
		return -1;
	if (shift && v > (UINT64_MAX >> shift))
		return -1;
	*out = (uint64_t)v << shift;
	return 0;
}

void gs_string_list_free(struct gs_string_list *l)
{
	free(l->items);
	l->items = NULL;
	l->count = 0;
}

/*
 * What a usage error shows of an argument: made printable (printable.h), so
 * the message stays one line and cannot drive the terminal.
 */
static const char *shown(const char *s, char *buf, size_t n)
{
	return gs_printable(buf, n, s);
}

static const struct gs_option *find_long(const struct gs_option *opts, const char *name, size_t len)
{
	for (const struct gs_option *o = opts; o->type != GS_OPT_END; o++)
		if (o->long_name && strlen(o->long_name) == len && !strncmp(o->long_name, name, len))
			return o;
	return NULL;
}

static const struct gs_option *find_short(const struct gs_option *opts, char c)
{
	for (const struct gs_option *o = opts; o->type != GS_OPT_END; o++)
		if (o->short_name && o->short_name == c)
			return o;
	return NULL;
}

static void opt_name(const struct gs_option *o, char *buf, size_t n)
{
	if (o->long_name)
		snprintf(buf, n, "--%s", o->long_name);
	else
		snprintf(buf, n, "-%c", o->short_name);
}

static int set_value(const struct gs_option *o, const char *arg, struct gs_err *err)
{
	char name[64], arg_shown[256];
	opt_name(o, name, sizeof(name));
	switch (o->type) {
	case GS_OPT_BOOL:
		*(bool *)o->value = true;
		return 0;
	case GS_OPT_STRING:
		*(const char **)o->value = arg;
		return 0;
	case GS_OPT_INT:
		if (gs_parse_int(arg, o->value))
			return gs_fail(err, GS_E_USAGE, "option '%s' expects an integer, got '%s'", name,
				       shown(arg, arg_shown, sizeof(arg_shown)));
		return 0;
	case GS_OPT_SECONDS:
		if (gs_parse_seconds(arg, o->value))
			return gs_fail(err, GS_E_USAGE, "option '%s' expects seconds (a number >= 0), got '%s'", name,
				       shown(arg, arg_shown, sizeof(arg_shown)));
		return 0;
	case GS_OPT_SIZE:
		if (gs_parse_size(arg, o->value))
			return gs_fail(err, GS_E_USAGE, "option '%s' expects a size such as 512M or 40G, got '%s'", name,
				       shown(arg, arg_shown, sizeof(arg_shown)));
		return 0;
	case GS_OPT_STRING_LIST: {
		struct gs_string_list *l = o->value;
		const char **items = realloc(l->items, sizeof(*items) * (size_t)(l->count + 1));
		if (!items)
			return gs_fail(err, GS_E_FAILURE, "out of memory");
		items[l->count++] = arg;
		l->items = items;
		return 0;
	}
	default:
		return gs_fail(err, GS_E_FAILURE, "internal error: bad option type");
	}
}

int gs_parse_options(int argc, char **argv, const struct gs_option *opts, int flags, int *nargs, struct gs_err *err)
{
	int out = 0;
	int i = 1;
	char arg_shown[256];
	for (; i < argc; i++) {
		char *a = argv[i];
		if (!strcmp(a, "--")) {
			i++;
			break;
		}
		if (!strcmp(a, "-h") || !strcmp(a, "--help"))
			return GS_PARSE_HELP;
		if (a[0] != '-' || a[1] == '\0') {
			argv[out++] = a;
			if (flags & GS_PARSE_STOP_AT_NON_OPTION) {
				i++;
				break;
			}
			continue;
		}
		if (a[1] == '-') {
			const char *name = a + 2;
			const char *eq = strchr(name, '=');
			size_t len = eq ? (size_t)(eq - name) : strlen(name);
			const struct gs_option *o = find_long(opts, name, len);
			if (!o)
				return gs_fail(err, GS_E_USAGE, "unknown option '%s'", shown(a, arg_shown, sizeof(arg_shown)));
			if (o->type == GS_OPT_BOOL) {
				if (eq)
					return gs_fail(err, GS_E_USAGE, "option '--%s' takes no value", o->long_name);
				*(bool *)o->value = true;
				continue;
			}
			const char *arg = eq ? eq + 1 : NULL;
			if (!arg) {
				if (i + 1 >= argc)
					return gs_fail(err, GS_E_USAGE, "option '--%s' requires a value", o->long_name);
				arg = argv[++i];
			}
			int rc = set_value(o, arg, err);
			if (rc)
				return rc;
			continue;
		}
		/* one or more short options: -vq, or -t5 / -t 5 */
		for (const char *p = a + 1; *p; p++) {
			const struct gs_option *o = find_short(opts, *p);
			if (!o)
				return gs_fail(err, GS_E_USAGE, "unknown option '-%c'", *p);
			if (o->type == GS_OPT_BOOL) {
				*(bool *)o->value = true;
				continue;
			}
			const char *arg = p[1] ? p + 1 : NULL;
			if (!arg) {
				if (i + 1 >= argc)
					return gs_fail(err, GS_E_USAGE, "option '-%c' requires a value", *p);
				arg = argv[++i];
			}
			int rc = set_value(o, arg, err);
			if (rc)
				return rc;
			break;
		}
	}
	for (; i < argc; i++)
		argv[out++] = argv[i];
	*nargs = out;
	return 0;
}

void gs_print_usage(FILE *out, const char *const *usage, const struct gs_option *opts)
{
	for (int i = 0; usage[i]; i++)
		fprintf(out, "%s%s\n", i == 0 ? "usage: " : (usage[i][0] ? "   or: " : ""), usage[i]);
	fputc('\n', out);
	for (const struct gs_option *o = opts; o->type != GS_OPT_END; o++) {
		char left[96];
		int n = 0;
		if (o->short_name && o->long_name)
			n = snprintf(left, sizeof(left), "-%c, --%s", o->short_name, o->long_name);
		else if (o->short_name)
			n = snprintf(left, sizeof(left), "-%c", o->short_name);
		else
			n = snprintf(left, sizeof(left), "    --%s", o->long_name);
		if (o->argh && n > 0 && (size_t)n < sizeof(left))
			snprintf(left + n, sizeof(left) - (size_t)n, " %s", o->argh);
		fprintf(out, "    %-26s %s\n", left, o->help ? o->help : "");
	}
}
