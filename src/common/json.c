/*
 * json.c - streaming JSON writer (see json.h). Its output is ASCII: strings
 * keep their exact text as escapes (quoted()).
 */
#include "common/json.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/printable.h"

void gs_json_init(struct gs_json *j)
{
	memset(j, 0, sizeof(*j));
	j->first[0] = true;
}

void gs_json_free(struct gs_json *j)
{
	free(j->buf);
	memset(j, 0, sizeof(*j));
}

static void put(struct gs_json *j, const char *s, size_t n)
{
	if (j->failed)
		return;
	if (j->len + n + 1 > j->cap) {
		size_t cap = j->cap ? j->cap : 256;
		while (cap < j->len + n + 1)
			cap *= 2;
		char *nb = realloc(j->buf, cap);
		if (!nb) {
			j->failed = true;
			return;
		}
		j->buf = nb;
		j->cap = cap;
	}
	memcpy(j->buf + j->len, s, n);
	j->len += n;
	j->buf[j->len] = '\0';
}

static void puts_(struct gs_json *j, const char *s) { put(j, s, strlen(s)); }

/* Writes the comma that separates this value from the previous one. */
static void before_value(struct gs_json *j)
{
	if (j->pending_key) {
		j->pending_key = false;
		return;
	}
	if (!j->first[j->depth])
		put(j, ",", 1);
	j->first[j->depth] = false;
}

static void open_(struct gs_json *j, const char *c)
{
	before_value(j);
	puts_(j, c);
	if (j->depth + 1 >= GS_JSON_MAX_DEPTH) {
		j->failed = true;
		return;
	}
	j->depth++;
	j->first[j->depth] = true;
}

static void close_(struct gs_json *j, const char *c)
{
	if (j->depth == 0) {
		j->failed = true;
		return;
	}
	j->depth--;
	puts_(j, c);
}

void gs_json_object_begin(struct gs_json *j) { open_(j, "{"); }
void gs_json_object_end(struct gs_json *j) { close_(j, "}"); }
void gs_json_array_begin(struct gs_json *j) { open_(j, "["); }
void gs_json_array_end(struct gs_json *j) { close_(j, "]"); }

static void put_u(struct gs_json *j, uint32_t u)
{
	char esc[8];
	snprintf(esc, sizeof(esc), "\\u%04x", (unsigned)u);
	puts_(j, esc);
}

/*
 * s as a JSON string of printable ASCII alone: the exact text for a program
 * that reads it, harmless on a terminal where someone prints it. Controls
 * (C0, DEL, C1) and every other non-ASCII character are \u escapes (a
 * surrogate pair past U+FFFF); a byte that is not valid UTF-8 cannot be said
 * in JSON and becomes U+FFFD.
 */
static void quoted(struct gs_json *j, const char *s)
{
	put(j, "\"", 1);
	for (const char *p = s; *p;) {
		unsigned char c = (unsigned char)*p;
		switch (c) {
		case '"': puts_(j, "\\\""); p++; continue;
		case '\\': puts_(j, "\\\\"); p++; continue;
		case '\n': puts_(j, "\\n"); p++; continue;
		case '\r': puts_(j, "\\r"); p++; continue;
		case '\t': puts_(j, "\\t"); p++; continue;
		default: break;
		}
		if (c >= 0x20 && c < 0x7f) {
			put(j, p++, 1);
			continue;
		}
		uint32_t cp = c;
		int len = 1;
		if (c >= 0x80 && !(len = gs_utf8_char(p, &cp))) {
			cp = 0xfffd;
			len = 1;
		}
		p += len;
		if (cp > 0xffff) {
			cp -= 0x10000;
			put_u(j, 0xd800 | cp >> 10);
			put_u(j, 0xdc00 | (cp & 0x3ff));
		} else {
			put_u(j, cp);
		}
	}
	put(j, "\"", 1);
}

void gs_json_key(struct gs_json *j, const char *key)
{
	before_value(j);
	quoted(j, key);
	put(j, ":", 1);
	j->pending_key = true;
}

void gs_json_string(struct gs_json *j, const char *s)
{
	before_value(j);
	if (s)
		quoted(j, s);
	else
		puts_(j, "null");
}

void gs_json_int(struct gs_json *j, int64_t v)
{
	char b[32];
	before_value(j);
	snprintf(b, sizeof(b), "%" PRId64, v);
	puts_(j, b);
}

void gs_json_uint(struct gs_json *j, uint64_t v)
{
	char b[32];
	before_value(j);
	snprintf(b, sizeof(b), "%" PRIu64, v);
	puts_(j, b);
}

void gs_json_double(struct gs_json *j, double v)
{
	char b[64];
	before_value(j);
	if (!isfinite(v)) {
		puts_(j, "null");
		return;
	}
	snprintf(b, sizeof(b), "%.6g", v);
	puts_(j, b);
}

void gs_json_bool(struct gs_json *j, bool v)
{
	before_value(j);
	puts_(j, v ? "true" : "false");
}

void gs_json_null(struct gs_json *j)
{
	before_value(j);
	puts_(j, "null");
}

void gs_json_kv_string(struct gs_json *j, const char *k, const char *s) { gs_json_key(j, k); gs_json_string(j, s); }
void gs_json_kv_int(struct gs_json *j, const char *k, int64_t v) { gs_json_key(j, k); gs_json_int(j, v); }
void gs_json_kv_uint(struct gs_json *j, const char *k, uint64_t v) { gs_json_key(j, k); gs_json_uint(j, v); }
void gs_json_kv_double(struct gs_json *j, const char *k, double v) { gs_json_key(j, k); gs_json_double(j, v); }
void gs_json_kv_bool(struct gs_json *j, const char *k, bool v) { gs_json_key(j, k); gs_json_bool(j, v); }

const char *gs_json_finish(struct gs_json *j)
{
	if (j->failed || j->depth != 0 || j->pending_key || !j->buf)
		return NULL;
	return j->buf;
}
