/*
 * memkind.h - the one interface every kind of GPU memory the agent makes
 * releasable implements, and the registry the movement part walks.
 *
 * A kind (the agent's own allocations and slabs, the app's own VMM handles,
 * memory shared with other processes, peer access, pointer attributes)
 * registers one `struct gs_memkind` at the constructor (agent_main.c). The
 * mover and the lifecycle walk the registry and never name a kind: adding
 * one is a file of its own in memory/, its gs_memkind, and its line in
 * agent_main.c's list. Unset members are skipped.
 *
 * Each region a kind adds to a plan carries its kind (held_region.kind), so
 * its release and re-creation go back to the kind that described it.
 */
#ifndef GPUSNAP_AGENT_MEMORY_MEMKIND_H
#define GPUSNAP_AGENT_MEMORY_MEMKIND_H

#include <stdbool.h>
#include <stdint.h>

#include "agent/base/agent.h"
#include "agent/base/held.h"
#include "core/protocol.h"
#include "image/image.h"

struct gs_memkind {
	const char *name;
	/* intercept: its replacements of the driver's entry points */
	int (*install_hooks)(struct gs_err *err);
	/* in a fork child (one thread): forget the parent's records without touching them */
	void (*forget_after_fork)(void);
	/* `gpusnap state`: bring its records up to date (before any kind's stats), then count what the app sees */
	void (*refresh)(void);
	void (*stats)(struct gs_agent *a, uint64_t *count, uint64_t *bytes);
	/* a suspend has closed the gate: settle what the app left in flight (stream-ordered frees) */
	void (*quiesce)(struct gs_agent *a);
	/*
	 * describe: add each region it makes releasable to out (gs_held_add);
	 * on failure nothing of its own stays prepared. finish: the plan is
	 * gone (also after a failed describe of any kind).
	 */
	int (*describe)(struct gs_agent *a, struct gs_region_list *out, struct gs_err *err);
	void (*finish)(struct gs_agent *a);
	/* save and restore are the mover's copies; a kind releases a region's physical memory and makes it again */
	CUresult (*release)(struct gs_agent *a, const struct held_region *r);
	CUresult (*recreate)(struct gs_agent *a, struct held_region *r);
	/* every region is back: keep r's new handle in the kind's records */
	void (*recreated)(struct gs_agent *a, const struct held_region *r);
	/*
	 * peers: memory shared with other processes. before_suspend may refuse
	 * the suspend; bring_back makes the memory the others map again at a
	 * resume; after_resume ends the cycle; save_image writes into a dump
	 * what a restore must find; handle_request answers the requests that
	 * coordinate the processes (true: it was one of its own).
	 */
	int (*before_suspend)(struct gs_agent *a, struct gs_err *err);
	int (*bring_back)(struct gs_agent *a, struct gs_err *err);
	void (*after_resume)(void);
	int (*save_image)(struct gs_image_writer *w, struct gs_err *err);
	bool (*handle_request)(struct gs_agent *a, const struct gs_msg *req, struct gs_msg *reply);
};

#define GS_MEMKIND_MAX 8
/* Registers k (static storage) before the first CUDA call; -1 when the registry is full. */
int gs_memkind_register(const struct gs_memkind *k);

/* The walks, in registration order; the first failure stops a walk that can fail. */
int gs_memkind_install_hooks(struct gs_err *err);
void gs_memkind_forget_after_fork(void);
void gs_memkind_stats(struct gs_agent *a, uint64_t *count, uint64_t *bytes);
void gs_memkind_quiesce(struct gs_agent *a);
int gs_memkind_describe(struct gs_agent *a, struct gs_region_list *out, struct gs_err *err);
void gs_memkind_finish(struct gs_agent *a);
int gs_memkind_before_suspend(struct gs_agent *a, struct gs_err *err);
int gs_memkind_bring_back(struct gs_agent *a, struct gs_err *err);
void gs_memkind_after_resume(void);
int gs_memkind_save_image(struct gs_image_writer *w, struct gs_err *err);
bool gs_memkind_handle_request(struct gs_agent *a, const struct gs_msg *req, struct gs_msg *reply);

#endif
