/*
 * test_share_plan.c - memory shared between processes (core/share_plan.c):
 * the records' wire form, and linking imports to exports with the refusals
 * (an importer that keeps its descriptor, an import nobody exports, exports
 * of a process operated on alone).
 */
#include <stdlib.h>

#include "core/share_plan.h"
#include "test.h"

static void test_wire(void)
{
	struct gs_msg m;
	gs_msg_init(&m, GS_MSG_RESULT);
	struct gs_share_export e = { .vh = 0x4753000000000007ULL, .fd = 12, .flags = GS_SHARE_EXPORT_READY };
	struct gs_share_import i = { .vh = 0x4753000000000009ULL, .fd = -1, .flags = GS_SHARE_IMPORT_RELEASED,
				     .exporter = 4242, .export_vh = 0x4753000000000007ULL };
	struct gs_share_link l = { .import_vh = 9, .exporter = 77, .export_vh = 8, .fd_index = 3 };
	gs_share_add_export(&m, &e);
	gs_share_add_export(&m, &e);
	gs_share_add_import(&m, &i);
	gs_share_add_link(&m, &l);
	const void *frame;
	size_t len;
	struct gs_err err = { 0 };
	CHECK_INT(gs_msg_finish(&m, &frame, &len, &err), 0);
	struct gs_msg d;
	CHECK_INT(gs_msg_decode(frame, len, GS_PEER_AGENT, &d, &err), 0);
	struct gs_share_export *ex = NULL;
	struct gs_share_import *im = NULL;
	struct gs_share_link *ln = NULL;
	size_t n = 0;
	CHECK_INT(gs_share_get_exports(&d, 100, &ex, &n, &err), 0);
	CHECK_INT(n, 2);
	CHECK(ex && ex[1].pid == 100 && ex[1].vh == e.vh && ex[1].fd == 12 && ex[1].flags == GS_SHARE_EXPORT_READY);
	CHECK_INT(gs_share_get_imports(&d, 200, &im, &n, &err), 0);
	CHECK_INT(n, 1);
	CHECK(im && im[0].pid == 200 && im[0].fd == -1 && im[0].exporter == 4242 && im[0].export_vh == e.vh &&
	      im[0].flags == GS_SHARE_IMPORT_RELEASED);
	CHECK_INT(gs_share_get_links(&d, &ln, &n, &err), 0);
	CHECK(n == 1 && ln && ln[0].import_vh == 9 && ln[0].exporter == 77 && ln[0].export_vh == 8 && ln[0].fd_index == 3);
	free(ex);
	free(im);
	free(ln);
	gs_msg_free(&d);
	gs_msg_free(&m);

	/* a record of the wrong size is refused */
	gs_msg_init(&m, GS_MSG_RESULT);
	gs_msg_add_bytes(&m, GS_F_SHARE_EXPORT, "short", 5);
	CHECK_INT(gs_share_get_exports(&m, 1, &ex, &n, &err), GS_E_AGENT);
	gs_msg_free(&m);
}

/* Same file when the fds are equal (the processes do not matter here); fd 99 cannot be compared. */
static int same_fd(void *ctx, pid_t pa, int fa, pid_t pb, int fb, struct gs_err *err)
{
	(void)ctx;
	(void)pa;
	(void)pb;
	if (fa == 99 || fb == 99)
		return gs_fail(err, GS_E_PERMISSION, "cannot compare"), -1;
	return fa == fb ? 0 : 1;
}

static void test_plan(void)
{
	struct gs_err err = { 0 };
	/* a ring of two: each exports one buffer, imports the other's */
	struct gs_share_export ex[] = {
		{ .pid = 10, .vh = 1, .fd = 5, .flags = GS_SHARE_EXPORT_READY },
		{ .pid = 11, .vh = 2, .fd = 6, .flags = GS_SHARE_EXPORT_READY },
	};
	struct gs_share_import im[] = {
		{ .pid = 10, .vh = 3, .fd = 6 },
		{ .pid = 11, .vh = 4, .fd = 5 },
	};
	CHECK_INT(gs_share_plan(ex, 2, im, 2, true, same_fd, NULL, &err), 0);
	CHECK(im[0].exporter == 11 && im[0].export_vh == 2 && (im[0].flags & GS_SHARE_IMPORT_LINKED));
	CHECK(im[1].exporter == 10 && im[1].export_vh == 1 && (im[1].flags & GS_SHARE_IMPORT_LINKED));

	/* one process alone with exports: refused, naming it */
	CHECK_INT(gs_share_plan(ex, 1, NULL, 0, false, same_fd, NULL, &err), GS_E_STATE);
	CHECK(strstr(err.msg, "process 10 ") && strstr(err.msg, "--tree"));
	/* ... without exports (an importer only is still checked against nothing) */
	struct gs_share_import orphan = { .pid = 12, .vh = 5, .fd = 7 };
	CHECK_INT(gs_share_plan(ex, 2, &orphan, 1, true, same_fd, NULL, &err), GS_E_STATE);
	CHECK(strstr(err.msg, "process 12 ") != NULL);
	/* an export without a descriptor does not match */
	struct gs_share_export closed = { .pid = 10, .vh = 1, .fd = 7, .flags = 0 };
	CHECK_INT(gs_share_plan(&closed, 1, &orphan, 1, true, same_fd, NULL, &err), GS_E_STATE);
	/* an importer that keeps its descriptor */
	struct gs_share_import holds = { .pid = 13, .vh = 6, .fd = 5, .flags = GS_SHARE_IMPORT_APP_HOLDS };
	CHECK_INT(gs_share_plan(ex, 2, &holds, 1, true, same_fd, NULL, &err), GS_E_STATE);
	CHECK(strstr(err.msg, "process 13 ") && strstr(err.msg, "descriptor 5"));
	/* a released import keeps its link without a descriptor */
	struct gs_share_import released = { .pid = 14, .vh = 7, .fd = -1, .flags = GS_SHARE_IMPORT_RELEASED,
					    .exporter = 10, .export_vh = 1 };
	CHECK_INT(gs_share_plan(ex, 2, &released, 1, true, same_fd, NULL, &err), 0);
	CHECK(released.exporter == 10 && released.export_vh == 1);
	/* the comparison fails: so does the plan */
	struct gs_share_import cannot = { .pid = 15, .vh = 8, .fd = 99 };
	CHECK_INT(gs_share_plan(ex, 2, &cannot, 1, true, same_fd, NULL, &err), GS_E_PERMISSION);
}

static void test_image_records(void)
{
	struct gs_err err = { 0 };
	pid_t pid = 0;
	uint64_t vh = 0;
	CHECK_INT(gs_share_parse_import_meta("share.import.0", "exporter=4242 export_handle=0x10 handle=0x20 maps=0x7f0000+0x400000",
					     &pid, &vh, &err), 0);
	CHECK(pid == 4242 && vh == 0x10);
	CHECK_INT(gs_share_parse_import_meta("share.import.1", "exporter=0 export_handle=0x10 handle=0x20 maps=", &pid, &vh,
					     &err), GS_E_IMAGE);
	CHECK(strstr(err.msg, "share.import.1") != NULL);
	CHECK_INT(gs_share_parse_import_meta("k", "exporter=12 handle=0x20", &pid, &vh, &err), GS_E_IMAGE);
	CHECK_INT(gs_share_parse_import_meta("k", NULL, &pid, &vh, &err), GS_E_IMAGE);
	CHECK_INT(gs_share_parse_export_meta("share.export.0", "handle=0xabc", &vh, &err), 0);
	CHECK(vh == 0xabc);
	CHECK_INT(gs_share_parse_export_meta("share.export.0", "handle=0xabc trailing", &vh, &err), GS_E_IMAGE);
	CHECK_INT(gs_share_parse_export_meta("share.export.0", "vh=1", &vh, &err), GS_E_IMAGE);
}

int main(void)
{
	RUN(test_wire);
	RUN(test_plan);
	RUN(test_image_records);
	return TEST_SUMMARY();
}
