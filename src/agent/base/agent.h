/*
 * agent.h - the state of libgpusnap.so inside the app: the real driver
 * table, the allocations it made releasable, per-device resources, and
 * whether the app's data is on the GPU or held in host memory.
 *
 * The bottom of the agent (base/): it names no part above it, which hear of
 * its changes through the listeners below. agent_state.c holds it.
 *
 * Ownership: one global `struct gs_agent` (gs_agent_get()), static in
 * agent_state.c, never freed (the process may call CUDA until exit).
 * Allocation hooks run inside the gate and suspend closes the gate first, so
 * hooks and the data mover never run at once. Two locks, taken in this order:
 * `lock` protects the state against two control requests at once (a suspend
 * holds it while it closes the gate and waits for the app's threads to leave
 * the driver); `setup_lock` protects loading the driver table and a device's
 * first-use set-up, which allocation hooks do inside the gate, so no thread
 * holding it ever waits for the gate or for `lock`.
 */
#ifndef GPUSNAP_AGENT_AGENT_H
#define GPUSNAP_AGENT_AGENT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "core/alloc_registry.h"
#include "core/protocol.h"
#include "core/suballoc.h"
#include "cuda/driver.h"

#define GS_AGENT_MAX_DEVICES 64
#define GS_AGENT_LANES 4

struct gs_agent_device {
	bool used;
	int ordinal;
	CUcontext ctx;       /* the context the agent copies in here: one of the app's, alive (agent_contexts.c) */
	uint64_t granularity;
	struct gs_suballoc *sub;
	struct gs_agent *agent;
	CUstream lanes[GS_AGENT_LANES]; /* the mover's copy streams, made at the first suspend */
	bool lanes_ready;
	bool announced; /* its device_ready listeners were called (atomic; set under setup_lock) */
};

struct gs_agent {
	struct gs_cuda cu; /* the real driver: never goes through the gate */
	bool cuda_ready;   /* cu loaded with its memory API */
	struct gs_err cuda_failure; /* why it could not be, after the one attempt */
	pthread_mutex_t lock;
	pthread_mutex_t setup_lock; /* after `lock`: cu's loading, a device's first use */
	struct gs_agent_device devices[GS_AGENT_MAX_DEVICES];
	/* allocations the app sees (DEVICE, SUBALLOC, POOL kinds) */
	struct gs_alloc_registry *allocs;
	/* slabs of the sub-allocators: kind DEVICE, handle = physical handle, user = device */
	struct gs_alloc_registry *slabs;
	enum gs_agent_state state; /* core/protocol.h; written only by agent_lifecycle.c's set_state */
	struct gs_agent_held *held; /* the app's data on its way out or held while suspended (agent_mover.h) */
	/* counters for `gpusnap state`: memory the agent cannot release (left to the driver path) */
	uint64_t unmanaged_allocs, unmanaged_bytes;
	/* stream-ordered frees waiting for their stream (cuMemFreeAsync) */
	struct gs_deferred_free *deferred;
	pthread_mutex_t deferred_lock;
};

struct gs_agent *gs_agent_get(void);

/* Loads the real driver table on first use (not in the constructor: no CUDA before the app's first call). */
int gs_agent_cuda(struct gs_agent *a, struct gs_err *err);
/* The device of the current context, creating its per-device state on first use. */
struct gs_agent_device *gs_agent_current_device(struct gs_agent *a, CUresult *cuerr);

/*
 * Notifications: base names no part above it. A part that must hear of a
 * change in the state registers a listener (the constructor registers them
 * all before any CUDA call, in the order they run); unset members are
 * skipped.
 */
struct gs_agent_listener {
	const char *name;
	/*
	 * A device's first use, under setup_lock, after base set up d (context,
	 * granularity, the registries): set up what the part keeps per device.
	 * Nonzero fails the use, and the listeners after it are not called.
	 */
	int (*device_setup)(struct gs_agent *a, struct gs_agent_device *d, struct gs_err *err);
	/* true while a device's announcement (device_ready) must wait: the next use announces it then */
	bool (*hold_announce)(struct gs_agent *a);
	/* the device is set up and announced, once, outside the locks, on the thread that first used it */
	void (*device_ready)(struct gs_agent *a, struct gs_agent_device *d);
	/* d's copy context changed (the old one is gone) */
	void (*context_changed)(struct gs_agent *a, struct gs_agent_device *d);
};

#define GS_AGENT_MAX_LISTENERS 8
/* Registers l (static storage) for every notification; -1 when the table is full. */
int gs_agent_listen(const struct gs_agent_listener *l);
void gs_agent_notify_context_changed(struct gs_agent *a, struct gs_agent_device *d);

/*
 * In a fork child: the state as if no CUDA call had been made (locks anew,
 * no device, no records: the parent's are left as they are, not freed).
 */
void gs_agent_forget_after_fork(struct gs_agent *a);

#endif
