/*
 * agent_pointer.c - pointer attributes of the agent's allocations (see
 * agent_pointer.h).
 */
#include "agent/memory/agent_pointer.h"

#include <stdbool.h>
#include <string.h>

#include "agent/base/agent.h"
#include "agent/intercept/gate.h"
#include "agent/intercept/interpose.h"

/* CUpointer_attribute values of cuda.h */
#define ATTR_CONTEXT 1
#define ATTR_MEMORY_TYPE 2
#define ATTR_BUFFER_ID 7
#define ATTR_DEVICE_ORDINAL 9
#define ATTR_RANGE_START_ADDR 11
#define ATTR_RANGE_SIZE 12
#define MEMORYTYPE_DEVICE 2
/* "GS" in the top 16 bits: the driver numbers its buffers from 1 */
#define BUFFER_ID_TAG (0x4753ULL << 48)

static struct {
	CUresult (*cuPointerGetAttribute)(void *, int, CUdeviceptr);
	CUresult (*cuPointerGetAttributes)(unsigned, int *, void **, CUdeviceptr);
} real;

/* The agent's allocation that holds ptr. */
static bool find_alloc(CUdeviceptr ptr, struct gs_alloc_rec *rec)
{
	struct gs_agent *a = gs_agent_get();
	return a->allocs && gs_alloc_registry_find(a->allocs, ptr, rec) &&
	       (rec->kind == GS_ALLOC_DEVICE || rec->kind == GS_ALLOC_SUBALLOC) && rec->device >= 0 &&
	       rec->device < GS_AGENT_MAX_DEVICES;
}

/* Writes attribute attr of rec into data; false when it is the driver's to answer. */
static bool answer(const struct gs_alloc_rec *rec, int attr, void *data)
{
	struct gs_agent *a = gs_agent_get();
	switch (attr) {
	case ATTR_CONTEXT: {
		CUcontext ctx = a->devices[rec->device].ctx;
		if (!ctx)
			return false;
		memcpy(data, &ctx, sizeof(ctx));
		return true;
	}
	case ATTR_MEMORY_TYPE: {
		unsigned type = MEMORYTYPE_DEVICE;
		memcpy(data, &type, sizeof(type));
		return true;
	}
	case ATTR_BUFFER_ID: {
		unsigned long long id = BUFFER_ID_TAG | rec->id;
		memcpy(data, &id, sizeof(id));
		return true;
	}
	case ATTR_DEVICE_ORDINAL: {
		int dev = rec->device;
		memcpy(data, &dev, sizeof(dev));
		return true;
	}
	case ATTR_RANGE_START_ADDR: {
		CUdeviceptr start = rec->va;
		memcpy(data, &start, sizeof(start));
		return true;
	}
	case ATTR_RANGE_SIZE: {
		size_t size = rec->size;
		memcpy(data, &size, sizeof(size));
		return true;
	}
	default:
		return false;
	}
}

static CUresult pointer_attribute(void *data, int attr, CUdeviceptr ptr)
{
	struct gs_alloc_rec rec;
	if (data && find_alloc(ptr, &rec) && answer(&rec, attr, data))
		return CUDA_SUCCESS;
	return real.cuPointerGetAttribute ? real.cuPointerGetAttribute(data, attr, ptr) : CUDA_ERROR_NOT_FOUND;
}

/*
 * The driver answers first (for a pointer it does not know it fills in empty
 * values and succeeds), then the agent's answers replace its own for the
 * agent's allocations. A call the driver refuses (a bad attribute) stays refused.
 */
static CUresult pointer_attributes(unsigned n, int *attrs, void **data, CUdeviceptr ptr)
{
	if (!real.cuPointerGetAttributes)
		return CUDA_ERROR_NOT_FOUND;
	CUresult r = real.cuPointerGetAttributes(n, attrs, data, ptr);
	struct gs_alloc_rec rec;
	if (r != CUDA_SUCCESS || !attrs || !data || !find_alloc(ptr, &rec))
		return r;
	for (unsigned i = 0; i < n; i++)
		if (data[i])
			answer(&rec, attrs[i], data[i]);
	return r;
}

static CUresult hook_cuPointerGetAttribute(void *data, int attr, CUdeviceptr ptr)
{
	return GS_GATED(pointer_attribute(data, attr, ptr));
}

static CUresult hook_cuPointerGetAttributes(unsigned n, int *attrs, void **data, CUdeviceptr ptr)
{
	return GS_GATED(pointer_attributes(n, attrs, data, ptr));
}

int gs_pointer_install_hooks(struct gs_err *err)
{
	static const struct gs_interpose_hook hooks[] = {
		{ "cuPointerGetAttribute", (void *)hook_cuPointerGetAttribute, (void **)&real.cuPointerGetAttribute },
		{ "cuPointerGetAttributes", (void *)hook_cuPointerGetAttributes, (void **)&real.cuPointerGetAttributes },
	};
	return gs_interpose_replace_all(hooks, sizeof(hooks) / sizeof(hooks[0]), err);
}

/* Pointer attributes (memory/memkind.h): hooks only. */
const struct gs_memkind gs_pointer_kind = {
	.name = "pointer",
	.install_hooks = gs_pointer_install_hooks,
};
