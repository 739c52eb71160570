/*
 * test_agent_parts.c - how the agent's parts reach each other without naming
 * the parts above: base's listeners (a device's first use, a changed copy
 * context) and the registry of memory kinds the movement part walks. Built
 * from the agent's own sources (base/agent_state.c, base/held.c,
 * memory/memkind.c) over a driver table of stand-ins: no GPU, no libcuda.
 */
#include "../../src/agent/base/agent_state.c"
#include "../../src/agent/base/held.c"
#include "../../src/agent/memory/memkind.c"

#include <stdlib.h>

#include "test.h"

/* ------------------------------------------------ a driver of stand-ins */

static CUdevice current_dev;
static CUresult fake_ctx_get_device(CUdevice *d)
{
	*d = current_dev;
	return CUDA_SUCCESS;
}
static CUresult fake_ctx_get_current(CUcontext *c)
{
	*c = (CUcontext)(uintptr_t)(0x1000 + current_dev);
	return CUDA_SUCCESS;
}
static CUresult fake_granularity(size_t *g, const CUmemAllocationProp *p, int flags)
{
	(void)p;
	(void)flags;
	*g = 2 << 20;
	return CUDA_SUCCESS;
}

/* ----------------------------------------------------------- listeners */

static char trail[256]; /* what was called, in order */
static void note(const char *s) { snprintf(trail + strlen(trail), sizeof(trail) - strlen(trail), "%s ", s); }

static bool fail_setup, hold;
static int first_setup(struct gs_agent *a, struct gs_agent_device *d, struct gs_err *err)
{
	(void)a;
	CHECK(d->granularity == 2 << 20 && d->ctx != NULL); /* base set the device up before */
	note("setup1");
	return fail_setup ? gs_fail(err, GS_E_AGENT, "no sub-allocator") : 0;
}
static int second_setup(struct gs_agent *a, struct gs_agent_device *d, struct gs_err *err)
{
	(void)a;
	(void)d;
	(void)err;
	note("setup2");
	return 0;
}
static bool held_announce(struct gs_agent *a)
{
	(void)a;
	return hold;
}
static void ready(struct gs_agent *a, struct gs_agent_device *d)
{
	(void)a;
	note(d->ordinal == 1 ? "ready1" : "ready");
}
static void changed(struct gs_agent *a, struct gs_agent_device *d)
{
	(void)a;
	(void)d;
	note("changed");
}

static const struct gs_agent_listener l1 = { .name = "one", .device_setup = first_setup };
static const struct gs_agent_listener l2 = { .name = "two",
					     .device_setup = second_setup,
					     .hold_announce = held_announce,
					     .device_ready = ready,
					     .context_changed = changed };

static void test_listeners(void)
{
	struct gs_agent *a = gs_agent_get();
	a->cu.cuCtxGetDevice = fake_ctx_get_device;
	a->cu.cuCtxGetCurrent = fake_ctx_get_current;
	a->cu.cuMemGetAllocationGranularity = fake_granularity;
	a->cuda_ready = true;
	CHECK_INT(gs_agent_listen(&l1), 0);
	CHECK_INT(gs_agent_listen(&l2), 0);

	/* a failing set-up stops the walk and fails the use; the next use tries again */
	current_dev = 1;
	fail_setup = true;
	CUresult r = CUDA_SUCCESS;
	CHECK(gs_agent_current_device(a, &r) == NULL);
	CHECK(r != CUDA_SUCCESS);
	CHECK_STR(trail, "setup1 ");
	trail[0] = 0;
	fail_setup = false;

	/* held: set up in order, not announced; the next use after the hold announces it, once */
	hold = true;
	struct gs_agent_device *d = gs_agent_current_device(a, &r);
	CHECK(d != NULL && d->ordinal == 1 && d->used && !d->announced);
	CHECK_STR(trail, "setup1 setup2 ");
	trail[0] = 0;
	hold = false;
	CHECK(gs_agent_current_device(a, &r) == d);
	CHECK_STR(trail, "ready1 ");
	CHECK(gs_agent_current_device(a, &r) == d);
	CHECK_STR(trail, "ready1 ");
	trail[0] = 0;

	gs_agent_notify_context_changed(a, d);
	CHECK_STR(trail, "changed ");
	trail[0] = 0;

	/*
	 * a fork child's state: no device, the listeners kept. The child forgets
	 * the registries without freeing them (they describe the parent's
	 * memory); here, the only process, they are freed after the check.
	 */
	struct gs_alloc_registry *allocs = a->allocs, *slabs = a->slabs;
	gs_agent_forget_after_fork(a);
	CHECK(!a->devices[1].used && !a->cuda_ready && a->allocs == NULL && a->slabs == NULL);
	gs_alloc_registry_free(allocs);
	gs_alloc_registry_free(slabs);

	for (int i = 2; i < GS_AGENT_MAX_LISTENERS; i++)
		CHECK_INT(gs_agent_listen(&l1), 0);
	CHECK_INT(gs_agent_listen(&l1), -1); /* full: refused, not written past the table */
}

/* --------------------------------------------------------- memory kinds */

static int k1_describe(struct gs_agent *a, struct gs_region_list *out, struct gs_err *err)
{
	(void)a;
	(void)err;
	struct held_region r = { .va = 0x1000, .size = 64 };
	note("describe1");
	return gs_held_add(out, &r) || gs_held_add(out, &r);
}
static bool k2_fails;
static int k2_describe(struct gs_agent *a, struct gs_region_list *out, struct gs_err *err)
{
	(void)a;
	struct held_region r = { .va = 0x9000, .size = 4096 };
	note("describe2");
	if (gs_held_add(out, &r))
		return -1;
	return k2_fails ? gs_fail(err, GS_E_AGENT, "kind two refused") : 0;
}
static int k3_describe(struct gs_agent *a, struct gs_region_list *out, struct gs_err *err)
{
	(void)a;
	(void)out;
	(void)err;
	note("describe3");
	return 0;
}
static void k1_finish(struct gs_agent *a)
{
	(void)a;
	note("finish1");
}
static void k1_stats(struct gs_agent *a, uint64_t *count, uint64_t *bytes)
{
	(void)a;
	*count = 2;
	*bytes = 128;
}
static void k2_stats(struct gs_agent *a, uint64_t *count, uint64_t *bytes)
{
	(void)a;
	*count = 1;
	*bytes = 4096;
}
static void k2_refresh(void) { note("refresh2"); }
static bool k2_handle(struct gs_agent *a, const struct gs_msg *req, struct gs_msg *reply)
{
	(void)a;
	(void)reply;
	note("handle2");
	return req->type == 33;
}
static bool k3_handle(struct gs_agent *a, const struct gs_msg *req, struct gs_msg *reply)
{
	(void)a;
	(void)req;
	(void)reply;
	note("handle3");
	return true;
}
static int k1_before(struct gs_agent *a, struct gs_err *err)
{
	(void)a;
	note("before1");
	return gs_fail(err, GS_E_STATE, "not now");
}
static int k2_before(struct gs_agent *a, struct gs_err *err)
{
	(void)a;
	(void)err;
	note("before2");
	return 0;
}

static const struct gs_memkind k1 = { .name = "one",
				      .describe = k1_describe,
				      .finish = k1_finish,
				      .stats = k1_stats,
				      .before_suspend = k1_before };
static const struct gs_memkind k2 = { .name = "two",
				      .describe = k2_describe,
				      .stats = k2_stats,
				      .refresh = k2_refresh,
				      .handle_request = k2_handle,
				      .before_suspend = k2_before };
static const struct gs_memkind k3 = { .name = "three", .describe = k3_describe, .handle_request = k3_handle };

static void test_memory_kinds(void)
{
	struct gs_agent *a = gs_agent_get();
	struct gs_err err = { 0 };
	CHECK_INT(gs_memkind_register(&k1), 0);
	CHECK_INT(gs_memkind_register(&k2), 0);
	CHECK_INT(gs_memkind_register(&k3), 0);

	/* every kind's regions, in order, each tagged with the kind that described it */
	trail[0] = 0;
	struct gs_region_list list = { 0 };
	CHECK_INT(gs_memkind_describe(a, &list, &err), 0);
	CHECK_STR(trail, "describe1 describe2 describe3 ");
	CHECK_INT(list.n, 3);
	CHECK(list.r[0].kind == &k1 && list.r[1].kind == &k1 && list.r[2].kind == &k2);
	CHECK(list.r[2].va == 0x9000);
	free(list.r);

	/* a failing kind stops the walk; what it added is tagged all the same (the caller frees the list) */
	trail[0] = 0;
	k2_fails = true;
	list = (struct gs_region_list){ 0 };
	CHECK(gs_memkind_describe(a, &list, &err) != 0);
	CHECK_CONTAINS(err.msg, "kind two refused");
	CHECK_STR(trail, "describe1 describe2 ");
	CHECK(list.n == 3 && list.r[2].kind == &k2);
	free(list.r);
	k2_fails = false;

	trail[0] = 0;
	gs_memkind_finish(a);
	CHECK_STR(trail, "finish1 ");

	/* stats: every kind refreshed first, then summed */
	trail[0] = 0;
	uint64_t count = 99, bytes = 99;
	gs_memkind_stats(a, &count, &bytes);
	CHECK_INT(count, 3);
	CHECK_INT(bytes, 128 + 4096);
	CHECK_STR(trail, "refresh2 ");

	/* a request goes to the kinds in order until one takes it */
	struct gs_msg req, reply;
	gs_msg_init(&req, 33);
	gs_msg_init(&reply, GS_MSG_RESULT);
	trail[0] = 0;
	CHECK(gs_memkind_handle_request(a, &req, &reply));
	CHECK_STR(trail, "handle2 ");
	gs_msg_free(&req);
	gs_msg_init(&req, 34);
	trail[0] = 0;
	CHECK(gs_memkind_handle_request(a, &req, &reply));
	CHECK_STR(trail, "handle2 handle3 ");
	gs_msg_free(&req);
	gs_msg_free(&reply);

	/* the first kind that refuses a suspend stops it */
	trail[0] = 0;
	CHECK_INT(gs_memkind_before_suspend(a, &err), GS_E_STATE);
	CHECK_STR(trail, "before1 ");

	/* kinds with nothing to do for a walk are skipped */
	CHECK_INT(gs_memkind_bring_back(a, &err), 0);
	CHECK_INT(gs_memkind_install_hooks(&err), 0);

	for (int i = 3; i < GS_MEMKIND_MAX; i++)
		CHECK_INT(gs_memkind_register(&k3), 0);
	CHECK_INT(gs_memkind_register(&k3), -1);
}

int main(void)
{
	RUN(test_listeners);
	RUN(test_memory_kinds);
	return TEST_SUMMARY();
}
