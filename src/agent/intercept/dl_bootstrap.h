/*
 * dl_bootstrap.h - the real dlsym and dlvsym, found without calling either
 * (dl_bootstrap.c says how): for interpose.c and the assembly of
 * gate_x86_64.S, which read the pointers.
 */
#ifndef GPUSNAP_AGENT_INTERCEPT_DL_BOOTSTRAP_H
#define GPUSNAP_AGENT_INTERCEPT_DL_BOOTSTRAP_H

/* libc's dlsym and dlvsym, once gs_dl_bootstrap found them (NULL before). */
extern void *gs_real_dlsym_fn, *gs_real_dlvsym_fn;
/* Finds them; 1 when both were found. Safe before any library is initialized. */
int gs_dl_bootstrap(void);

#endif
