/*
 * fake_app_common.h - what the fake-driver test apps (agent_app.c,
 * app_vmm.c) share: telling the fake driver they are CUDA processes, and
 * the --signals mode in which CRIU can dump them (no stdin; SIGUSR1 asks for
 * a verify, whose answer goes to stdout).
 */
#ifndef GPUSNAP_TESTS_FAKE_APP_COMMON_H
#define GPUSNAP_TESTS_FAKE_APP_COMMON_H

/* Writes FAKE_CUDA_DIR/<pid> ("running, no GPU state moved"), so gpusnap sees a CUDA process; exits on failure. */
void fake_app_register(const char *app_name);
/* For --signals: SIGUSR1 handler installed, stdin from /dev/null. 0, or -1 if stdin cannot be replaced. */
int fake_app_signals_setup(void);
/* Serves SIGUSR1 by calling verify (then flushing stdout) until the process is killed. */
void fake_app_serve_signals(void (*verify)(void)) __attribute__((noreturn));

#endif
