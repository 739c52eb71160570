/*
 * gpu_copy.h - the transfer engine's one way to the GPU (agent_ring.c): copies
 * between host memory and a device on the device's copy lanes, events that
 * say when a lane's work is done, host memory pinned for the copy engines,
 * and whose context the calling thread works in. The mover makes the lanes
 * and pins its staging pool through it too.
 *
 * This is the vendor seam of the movement part: CUDA (gpu_copy_cuda.c) is
 * its one backend. A second vendor's backend implements these members and
 * is the one agent_ring.c points at; the engine and its ends stay as they are.
 * Codes are the backend's (0: success), named by strerror.
 */
#ifndef GPUSNAP_AGENT_MOVEMENT_GPU_COPY_H
#define GPUSNAP_AGENT_MOVEMENT_GPU_COPY_H

#include <stddef.h>
#include <stdint.h>

#include "agent/base/agent.h"

struct gs_gpu_copy {
	const char *name;
	/* The calling thread works for device dev from here on (its copy context). */
	int (*use_device)(struct gs_agent *a, int dev);
	/* The calling thread's context, to put back with set_context; a device's copy context. */
	void *(*get_context)(struct gs_agent *a);
	int (*set_context)(struct gs_agent *a, void *ctx);
	void *(*device_context)(struct gs_agent *a, int dev);
	/* Makes lane `lane` of device dev (a stream that does not wait for the app's work); dev's context current. */
	int (*make_lane)(struct gs_agent *a, int dev, int lane);
	/* Pins [p, p + len) for the copy engines of every device; a context must be current. */
	int (*pin)(struct gs_agent *a, void *p, size_t len);
	void (*unpin)(struct gs_agent *a, void *p);
	/* An event marks the end of the work queued on a lane before it; made in the current context. */
	int (*event_create)(struct gs_agent *a, void **ev);
	void (*event_destroy)(struct gs_agent *a, void *ev);
	int (*event_record)(struct gs_agent *a, void *ev, int dev, int lane);
	int (*event_wait)(struct gs_agent *a, void *ev);
	/* Queued on device dev's lane, in its context: a copy to host, to the device, or zeroing on the device. */
	int (*to_host)(struct gs_agent *a, void *host, uint64_t va, size_t n, int dev, int lane);
	int (*to_device)(struct gs_agent *a, uint64_t va, const void *host, size_t n, int dev, int lane);
	int (*zero)(struct gs_agent *a, uint64_t va, size_t n, int dev, int lane);
	/* Waits for every lane of device dev (errors are the next call's to report). */
	void (*sync_lanes)(struct gs_agent *a, int dev);
	const char *(*strerror)(struct gs_agent *a, int code, char *buf, size_t n);
	int injected; /* the code an injected copy failure reports (common/fault.h) */
};

/* The CUDA backend (gpu_copy_cuda.c). */
extern const struct gs_gpu_copy gs_gpu_copy_cuda;

#endif
