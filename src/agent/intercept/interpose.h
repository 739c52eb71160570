/*
 * interpose.h - how the app's calls into the CUDA driver are made to pass
 * through the agent: its dlsym/dlvsym, its replacement of cuGetProcAddress,
 * its exported driver symbols, and the registry of the agent's own
 * replacements for selected driver entry points.
 *
 * Every driver entry point the app obtains (by linking, by dlsym on the
 * driver, by cuGetProcAddress) leads through the gate (gate.h), except those
 * the agent replaced, which do their own gating. The agent's own calls use
 * the real entry points (gs_interpose_real) and are never gated.
 */
#ifndef GPUSNAP_AGENT_INTERPOSE_H
#define GPUSNAP_AGENT_INTERPOSE_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"

/*
 * Makes the driver entry point `versioned_name` (as the driver exports it:
 * "cuMemAlloc_v2", "cuLaunchKernel_ptsz"; register each variant separately)
 * lead to `replacement` on every path: the exported symbol, dlsym on the
 * driver, and cuGetProcAddress whenever it returns that variant (matched by
 * address: the driver's pointer for "cuMemAlloc" at version >= 3020 is
 * cuMemAlloc_v2's). The replacement is not wrapped in the gate: bracket its
 * body with gs_gate_enter_c/gs_gate_exit_c (or GS_GATED).
 *
 * *real_out (if real_out is non-NULL) receives the real, ungated function, or
 * NULL when the driver lacks it. It is written at once if the driver is loaded,
 * otherwise when the driver is first seen, which is always before the
 * replacement is first handed to the app. The driver is not loaded by this call.
 *
 * Register before the app resolves the entry point (the agent's constructor).
 * A late registration still redirects exports and pointers handed out
 * earlier, but those still pass the generic gate as well (harmless nesting).
 * Registering the same name again replaces the earlier replacement.
 * cuGetProcAddress and cuGetProcAddress_v2 belong to the interposer (GS_E_STATE).
 */
int gs_interpose_replace(const char *versioned_name, void *replacement, void **real_out, struct gs_err *err);

/* One replacement of a table for gs_interpose_replace_all: gs_interpose_replace's three arguments. */
struct gs_interpose_hook {
	const char *name;
	void *hook;
	void **real;
};

/*
 * gs_interpose_replace for each of hooks[0..n), in order. Stops at the
 * first that fails, its name added to the error; those before it stay
 * registered.
 */
int gs_interpose_replace_all(const struct gs_interpose_hook *hooks, size_t n, struct gs_err *err);

/*
 * The real, ungated driver function `versioned_name`, or NULL if the driver
 * lacks it or cannot be loaded. Loads the driver (dlopen of GPUSNAP_LIBCUDA or
 * libcuda.so.1) if the app has not yet; calls no driver function.
 */
void *gs_interpose_real(const char *versioned_name);

/* The real dlsym/dlvsym, past the interposer (also set as gs_cuda_dlsym). */
void *gs_real_dlsym(void *handle, const char *name);
void *gs_real_dlvsym(void *handle, const char *name, const char *version);

struct gs_interpose_stats {
	size_t stubs;          /* gated stubs made (one per distinct real function) */
	size_t exports_bound;  /* exported symbols resolved so far */
	size_t ungated;        /* entry points handed out without the gate (no stub could be made) */
	int driver_seen;       /* the driver library has been identified */
};
void gs_interpose_get_stats(struct gs_interpose_stats *st);

/*
 * The trampolines: entry stubs made at run time, one per real driver function,
 * each leading into the gate with the function's address. A stub needs no
 * prototype: it only loads the target and jumps, leaving every argument
 * register and the stack as the caller set them up.
 *
 * gs_tramp_for: the gated stub for target (the same stub for the same target
 * every time). NULL if no stub can be made (out of memory, or executable
 * mappings refused by the system's policy); callers then hand out target
 * ungated. gs_tramp_retarget: makes the stub made for target lead to
 * new_target instead (still through the gate); false if no stub exists for
 * target. gs_tramp_owns: p is the entry of one of our stubs.
 * gs_tramp_count: the number of stubs made so far.
 */
void *gs_tramp_for(void *target);
bool gs_tramp_retarget(void *target, void *new_target);
bool gs_tramp_owns(const void *p);
size_t gs_tramp_count(void);

/* Early set-up (constructor): real dlsym, gs_cuda_dlsym, the gate. No driver calls. */
void gs_interpose_init(void);

/*
 * Test hooks: tests/agent's apps run with LD_PRELOAD and reach the gate through
 * the one exported function gpusnap_interpose_test_hooks() (found with
 * dlsym(RTLD_DEFAULT, ...)). Not for production use.
 */
struct gs_interpose_test_hooks {
	int (*gate_close)(double timeout_s, struct gs_err *err);
	void (*gate_open)(void);
	int (*gate_exempt_current_thread)(struct gs_err *err);
	int (*gate_enter_c)(void);
	void (*gate_exit_c)(int token);
	int (*gate_inside_count)(void);
	int (*gate_waiting_count)(void);
	int (*gate_thread_count)(void);
	const char *(*gate_fence_name)(void);
	int (*replace)(const char *versioned_name, void *replacement, void **real_out, struct gs_err *err);
	void *(*real)(const char *versioned_name);
	void *(*export_address)(const char *name); /* our exported stub for name, NULL if not exported */
	int (*is_gated)(const void *fn);            /* fn is one of our stubs or exports */
	void (*get_stats)(struct gs_interpose_stats *st);
};
#define GPUSNAP_TEST_HOOKS_SYMBOL "gpusnap_interpose_test_hooks"
__attribute__((visibility("default"))) const struct gs_interpose_test_hooks *gpusnap_interpose_test_hooks(void);

/* Called only from the assembly (gate_x86_64.S). */
void *gs_dlsym_cu(void *handle, const char *name);
void *gs_dlvsym_cu(void *handle, const char *name, const char *version);
void *gs_export_resolve(unsigned index);

#endif
