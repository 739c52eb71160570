/*
 * json.h - a small streaming JSON writer into a growable buffer.
 *
 * Used for every --json output, so machine-readable output is always valid
 * JSON (strings escaped, commas placed by the writer, not by callers). The
 * output is ASCII: a string keeps its exact text, controls and non-ASCII
 * characters as \u escapes, so text that others control (a process's name)
 * cannot drive a terminal the JSON is printed on; a byte that is not UTF-8
 * becomes U+FFFD, as JSON holds only Unicode text.
 * Nesting depth is bounded by GS_JSON_MAX_DEPTH; deeper nesting sets an error
 * flag that gs_json_finish reports.
 */
#ifndef GPUSNAP_COMMON_JSON_H
#define GPUSNAP_COMMON_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GS_JSON_MAX_DEPTH 32

struct gs_json {
	char *buf;
	size_t len, cap;
	int depth;
	bool first[GS_JSON_MAX_DEPTH]; /* no element written yet at this depth */
	bool pending_key;              /* a key was written, its value comes next */
	bool failed;                   /* out of memory or nesting too deep */
};

void gs_json_init(struct gs_json *j);
void gs_json_free(struct gs_json *j);
void gs_json_object_begin(struct gs_json *j);
void gs_json_object_end(struct gs_json *j);
void gs_json_array_begin(struct gs_json *j);
void gs_json_array_end(struct gs_json *j);
void gs_json_key(struct gs_json *j, const char *key);
void gs_json_string(struct gs_json *j, const char *s);
void gs_json_int(struct gs_json *j, int64_t v);
void gs_json_uint(struct gs_json *j, uint64_t v);
void gs_json_double(struct gs_json *j, double v);
void gs_json_bool(struct gs_json *j, bool v);
void gs_json_null(struct gs_json *j);

/* key + value in one call, for objects */
void gs_json_kv_string(struct gs_json *j, const char *key, const char *s);
void gs_json_kv_int(struct gs_json *j, const char *key, int64_t v);
void gs_json_kv_uint(struct gs_json *j, const char *key, uint64_t v);
void gs_json_kv_double(struct gs_json *j, const char *key, double v);
void gs_json_kv_bool(struct gs_json *j, const char *key, bool v);

/* Returns the NUL-terminated text, or NULL if the writer failed or nesting is unbalanced. */
const char *gs_json_finish(struct gs_json *j);

#endif
