/*
 * fake_app_common.h - what the fake-driver test apps (agent_app.c,
 * app_vmm.c) share: telling the fake driver they are CUDA processes, and
 * the --signals mode in which CRIU can dump them (no stdin; SIGUSR1 asks for
 * a verify, whose answer goes to stdout).
 */
#ifndef GPUSNAP_TESTS_FAKE_APP_COMMON_H
#define GPUSNAP_TESTS_FAKE_APP_COMMON_H

/* For --signals: SIGUSR1 handler installed, stdin from /dev/null. 0, or -1 if stdin cannot be replaced. */
int fake_app_signals_setup(void);
/*
 * Registers with the fake, prints "READY <pid>", then serves: with signals,
 * SIGUSR1 runs verify until the process is killed; else one command per
 * stdin line: "verify", `command` (runs command_fn), "quit" (returns 0).
 */
int fake_app_serve(const char *app_name, int signals, void (*verify)(void), const char *command,
		   void (*command_fn)(void));

#endif
