/*
 * gpu_copy_cuda.c - the CUDA backend of the engine's GPU-copy interface
 * (gpu_copy.h), through the real driver table (a->cu), never the gate.
 */
#include "agent/movement/gpu_copy.h"

static int cuda_use_device(struct gs_agent *a, int dev)
{
	return (int)a->cu.cuCtxSetCurrent(a->devices[dev].ctx);
}

static void *cuda_get_context(struct gs_agent *a)
{
	CUcontext ctx = NULL;
	a->cu.cuCtxGetCurrent(&ctx);
	return ctx;
}

static int cuda_set_context(struct gs_agent *a, void *ctx)
{
	return (int)a->cu.cuCtxSetCurrent((CUcontext)ctx);
}

static void *cuda_device_context(struct gs_agent *a, int dev)
{
	return a->devices[dev].ctx;
}

static int cuda_make_lane(struct gs_agent *a, int dev, int lane)
{
	return (int)a->cu.cuStreamCreate(&a->devices[dev].lanes[lane], CU_STREAM_NON_BLOCKING);
}

static int cuda_pin(struct gs_agent *a, void *p, size_t len)
{
	/* PORTABLE: the memory serves every device's context */
	return (int)a->cu.cuMemHostRegister(p, len, CU_MEMHOSTREGISTER_PORTABLE);
}

static void cuda_unpin(struct gs_agent *a, void *p)
{
	a->cu.cuMemHostUnregister(p);
}

static int cuda_event_create(struct gs_agent *a, void **ev)
{
	CUevent e = NULL;
	CUresult r = a->cu.cuEventCreate(&e, CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING);
	*ev = r == CUDA_SUCCESS ? e : NULL;
	return (int)r;
}

static void cuda_event_destroy(struct gs_agent *a, void *ev)
{
	a->cu.cuEventDestroy((CUevent)ev);
}

static int cuda_event_record(struct gs_agent *a, void *ev, int dev, int lane)
{
	return (int)a->cu.cuEventRecord((CUevent)ev, a->devices[dev].lanes[lane]);
}

static int cuda_event_wait(struct gs_agent *a, void *ev)
{
	return (int)a->cu.cuEventSynchronize((CUevent)ev);
}

static int cuda_to_host(struct gs_agent *a, void *host, uint64_t va, size_t n, int dev, int lane)
{
	return (int)a->cu.cuMemcpyDtoHAsync(host, va, n, a->devices[dev].lanes[lane]);
}

static int cuda_to_device(struct gs_agent *a, uint64_t va, const void *host, size_t n, int dev, int lane)
{
	return (int)a->cu.cuMemcpyHtoDAsync(va, host, n, a->devices[dev].lanes[lane]);
}

static int cuda_zero(struct gs_agent *a, uint64_t va, size_t n, int dev, int lane)
{
	return (int)a->cu.cuMemsetD8Async(va, 0, n, a->devices[dev].lanes[lane]);
}

static void cuda_sync_lanes(struct gs_agent *a, int dev)
{
	struct gs_agent_device *d = &a->devices[dev];
	a->cu.cuCtxSetCurrent(d->ctx);
	for (int l = 0; l < GS_AGENT_LANES; l++)
		a->cu.cuStreamSynchronize(d->lanes[l]);
}

static const char *cuda_strerror(struct gs_agent *a, int code, char *buf, size_t n)
{
	return gs_cuda_strerror(&a->cu, (CUresult)code, buf, n);
}

const struct gs_gpu_copy gs_gpu_copy_cuda = {
	.name = "cuda",
	.use_device = cuda_use_device,
	.get_context = cuda_get_context,
	.set_context = cuda_set_context,
	.device_context = cuda_device_context,
	.make_lane = cuda_make_lane,
	.pin = cuda_pin,
	.unpin = cuda_unpin,
	.event_create = cuda_event_create,
	.event_destroy = cuda_event_destroy,
	.event_record = cuda_event_record,
	.event_wait = cuda_event_wait,
	.to_host = cuda_to_host,
	.to_device = cuda_to_device,
	.zero = cuda_zero,
	.sync_lanes = cuda_sync_lanes,
	.strerror = cuda_strerror,
	.injected = CUDA_ERROR_UNKNOWN,
};
