/*
 * fake_app_common.h - what the fake-driver test apps (agent_app.c,
 * app_vmm.c) share: finding the driver's entry points the ways real apps do
 * and making a context, telling the fake driver they are CUDA processes, and
 * the --signals mode in which CRIU can dump them (no stdin; SIGUSR1 asks for
 * a verify, whose answer goes to stdout), and stand-ins for the cuda.h types
 * of the VMM API that app_vmm.c and share_app.c pass the driver.
 */
#ifndef GPUSNAP_TESTS_FAKE_APP_COMMON_H
#define GPUSNAP_TESTS_FAKE_APP_COMMON_H

/* CUmemAllocationProp and CUmemAccessDesc of cuda.h, with the same layout */
struct fake_mem_prop {
	int type, handle_types, loc_type, loc_id;
	void *win32;
	unsigned char flags[8];
};
struct fake_mem_access {
	int loc_type, loc_id, flags;
};

/*
 * Opens the driver (GPUSNAP_LIBCUDA, else libcuda.so.1) for the app named
 * app_name, which later messages carry; exits on failure.
 */
void fake_app_open_driver(const char *app_name);
/* An entry point by dlsym from the opened driver; exits naming it if the driver lacks it. */
void *fake_app_need(const char *name);
/* An entry point by cuGetProcAddress_v2 (CUDA 12 semantics) into *out; exits on failure. */
void fake_app_gpa(const char *name, void *out);
/* cuInit, then device 0's primary context made current: 0, or -1 with a message. */
int fake_app_make_context(void);

/* For --signals: SIGUSR1 handler installed, stdin from /dev/null. 0, or -1 if stdin cannot be replaced. */
int fake_app_signals_setup(void);
/*
 * Registers with the fake, prints "READY <pid>" (after an "IO_URING ..."
 * line where FAKE_APP_IO_URING asks for rings: fake_app_common.c), then serves: with signals,
 * SIGUSR1 runs verify until the process is killed; else one command per
 * stdin line: "verify", a name in commands (ends with a NULL name; runs its fn), "quit" (returns 0).
 */
struct fake_app_command {
	const char *name;
	void (*fn)(void);
};
int fake_app_serve(const char *app_name, int signals, void (*verify)(void), const struct fake_app_command *commands);

#endif
