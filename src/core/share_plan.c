/*
 * share_plan.c - records of GPU memory shared between processes, their wire
 * form, and the matching of imports to exports (see share_plan.h).
 */
#include "core/share_plan.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put_u64s(struct gs_msg *m, uint16_t tag, const uint64_t *v, size_t n)
{
	uint8_t buf[8 * 8];
	for (size_t i = 0; i < n; i++)
		for (int b = 0; b < 8; b++)
			buf[i * 8 + (size_t)b] = (uint8_t)(v[i] >> (8 * b));
	gs_msg_add_bytes(m, tag, buf, n * 8);
}

static void get_u64s(const uint8_t *p, uint64_t *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		v[i] = 0;
		for (int b = 0; b < 8; b++)
			v[i] |= (uint64_t)p[i * 8 + (size_t)b] << (8 * b);
	}
}

void gs_share_add_export(struct gs_msg *m, const struct gs_share_export *e)
{
	uint64_t v[3] = { e->vh, (uint64_t)(int64_t)e->fd, e->flags };
	put_u64s(m, GS_F_SHARE_EXPORT, v, 3);
}

void gs_share_add_import(struct gs_msg *m, const struct gs_share_import *i)
{
	uint64_t v[5] = { i->vh, (uint64_t)(int64_t)i->fd, i->flags, (uint64_t)i->exporter, i->export_vh };
	put_u64s(m, GS_F_SHARE_IMPORT, v, 5);
}

void gs_share_add_link(struct gs_msg *m, const struct gs_share_link *l)
{
	uint64_t v[4] = { l->import_vh, (uint64_t)l->exporter, l->export_vh, l->fd_index };
	put_u64s(m, GS_F_SHARE_LINK, v, 4);
}

/* Calls put(ctx, index, values) for each record of tag in m; sizes checked first. */
static int collect(const struct gs_msg *m, uint16_t tag, size_t nvalues, void **out, size_t elem, size_t *n,
		   void (*put)(void *arr, size_t i, const uint64_t *v, pid_t pid), pid_t pid, const char *what,
		   struct gs_err *err)
{
	*out = NULL;
	*n = 0;
	size_t count = 0, total = gs_msg_field_count(m);
	struct gs_msg_field f;
	for (size_t i = 0; i < total; i++)
		if (gs_msg_field_at(m, i, &f) && f.tag == tag) {
			if (f.type != GS_FT_BYTES || f.len != nvalues * 8)
				return gs_fail(err, GS_E_AGENT, "malformed %s record (%zu bytes)", what, f.len);
			count++;
		}
	if (!count)
		return 0;
	void *arr = calloc(count, elem);
	if (!arr)
		return gs_fail(err, GS_E_FAILURE, "out of memory");
	size_t k = 0;
	for (size_t i = 0; i < total; i++)
		if (gs_msg_field_at(m, i, &f) && f.tag == tag) {
			uint64_t v[8];
			get_u64s(f.data, v, nvalues);
			put(arr, k++, v, pid);
		}
	*out = arr;
	*n = count;
	return 0;
}

static void put_export(void *arr, size_t i, const uint64_t *v, pid_t pid)
{
	((struct gs_share_export *)arr)[i] =
		(struct gs_share_export){ .pid = pid, .vh = v[0], .fd = (int)(int64_t)v[1], .flags = (uint32_t)v[2] };
}

static void put_import(void *arr, size_t i, const uint64_t *v, pid_t pid)
{
	((struct gs_share_import *)arr)[i] = (struct gs_share_import){
		.pid = pid, .vh = v[0], .fd = (int)(int64_t)v[1], .flags = (uint32_t)v[2],
		.exporter = (pid_t)v[3], .export_vh = v[4],
	};
}

static void put_link(void *arr, size_t i, const uint64_t *v, pid_t pid)
{
	(void)pid;
	((struct gs_share_link *)arr)[i] = (struct gs_share_link){
		.import_vh = v[0], .exporter = (pid_t)v[1], .export_vh = v[2], .fd_index = (uint32_t)v[3],
	};
}

int gs_share_get_exports(const struct gs_msg *m, pid_t pid, struct gs_share_export **out, size_t *n,
			 struct gs_err *err)
{
	return collect(m, GS_F_SHARE_EXPORT, 3, (void **)out, sizeof(**out), n, put_export, pid, "shared export", err);
}

int gs_share_get_imports(const struct gs_msg *m, pid_t pid, struct gs_share_import **out, size_t *n,
			 struct gs_err *err)
{
	return collect(m, GS_F_SHARE_IMPORT, 5, (void **)out, sizeof(**out), n, put_import, pid, "shared import", err);
}

int gs_share_get_links(const struct gs_msg *m, struct gs_share_link **out, size_t *n, struct gs_err *err)
{
	return collect(m, GS_F_SHARE_LINK, 4, (void **)out, sizeof(**out), n, put_link, 0, "shared link", err);
}

int gs_share_plan(struct gs_share_export *exports, size_t nexports, struct gs_share_import *imports, size_t nimports,
		  bool together, gs_share_same_file_fn same, void *ctx, struct gs_err *err)
{
	if (!together && nexports)
		return gs_fail(err, GS_E_STATE,
			       "process %d exported GPU memory to other processes (cuMemExportToShareableHandle): suspend "
			       "them together with --tree on their common parent",
			       (int)exports[0].pid);
	for (size_t i = 0; i < nimports; i++) {
		struct gs_share_import *im = &imports[i];
		if (im->flags & GS_SHARE_IMPORT_APP_HOLDS)
			return gs_fail(err, GS_E_STATE,
				       "process %d keeps the file descriptor %d of GPU memory it imported open: the memory "
				       "could not be released (close it after cuMemImportFromShareableHandle, as NCCL does)",
				       (int)im->pid, im->fd);
		if (im->flags & GS_SHARE_IMPORT_RELEASED)
			continue; /* linked by the suspend that released it */
		bool found = false;
		for (size_t k = 0; k < nexports && !found && im->fd >= 0; k++) {
			const struct gs_share_export *ex = &exports[k];
			if (!(ex->flags & GS_SHARE_EXPORT_READY) || ex->fd < 0)
				continue;
			int r = same(ctx, im->pid, im->fd, ex->pid, ex->fd, err);
			if (r < 0)
				return err->code ? err->code : gs_fail(err, GS_E_FAILURE, "cannot compare descriptors");
			if (r == 0) {
				im->exporter = ex->pid;
				im->export_vh = ex->vh;
				im->flags |= GS_SHARE_IMPORT_LINKED;
				found = true;
			}
		}
		if (!found)
			return gs_fail(err, GS_E_STATE,
				       "process %d maps GPU memory that no process of this %s exports under the gpusnap agent "
				       "(its exporter is outside, runs without the agent, or keeps the exported descriptor open)",
				       (int)im->pid, together ? "tree" : "operation");
	}
	return 0;
}

int gs_share_parse_import_meta(const char *key, const char *value, pid_t *exporter, uint64_t *export_vh,
			       struct gs_err *err)
{
	int pid = 0, used = 0;
	uint64_t vh = 0;
	if (!value || sscanf(value, "exporter=%d export_handle=%" SCNx64 " %n", &pid, &vh, &used) != 2 || used == 0 ||
	    pid <= 0 || strncmp(value + used, "handle=", 7))
		return gs_fail(err, GS_E_IMAGE, "malformed shared-memory record '%s' = '%s'", key, value ? value : "");
	*exporter = (pid_t)pid;
	*export_vh = vh;
	return 0;
}

int gs_share_parse_export_meta(const char *key, const char *value, uint64_t *vh, struct gs_err *err)
{
	int used = 0;
	if (!value || sscanf(value, "handle=%" SCNx64 "%n", vh, &used) != 1 || value[used])
		return gs_fail(err, GS_E_IMAGE, "malformed shared-memory record '%s' = '%s'", key, value ? value : "");
	return 0;
}
