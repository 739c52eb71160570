/*
 * fake_app_common.c - the plumbing the fake-driver test apps share (see
 * fake_app_common.h).
 */
#include "fake_app_common.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Writes FAKE_CUDA_DIR/<pid> ("running, no GPU state moved"), so gpusnap sees a CUDA process; exits on failure. */
static void fake_app_register(const char *app_name)
{
	const char *dir = getenv("FAKE_CUDA_DIR");
	if (!dir)
		return;
	char path[512];
	snprintf(path, sizeof(path), "%s/%d", dir, (int)getpid());
	FILE *f = fopen(path, "w");
	if (!f || fprintf(f, "0 0\n") < 0 || fclose(f)) {
		fprintf(stderr, "%s: cannot write %s\n", app_name, path);
		exit(1);
	}
}

static volatile sig_atomic_t verify_asked;

static void on_usr1(int sig)
{
	(void)sig;
	verify_asked = 1;
}

int fake_app_signals_setup(void)
{
	struct sigaction sa = { .sa_handler = on_usr1 };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL);
	int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (null < 0 || dup2(null, 0) < 0)
		return -1;
	close(null);
	return 0;
}

int fake_app_serve(const char *app_name, int signals, void (*verify)(void), const char *command,
		   void (*command_fn)(void))
{
	fake_app_register(app_name);
	printf("READY %d\n", (int)getpid());
	fflush(stdout);
	while (signals) {
		if (verify_asked) {
			verify_asked = 0;
			verify();
			fflush(stdout);
		}
		struct timespec ts = { 0, 10 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	char line[64];
	while (fgets(line, sizeof(line), stdin)) {
		line[strcspn(line, "\n")] = '\0';
		if (!strcmp(line, "verify"))
			verify();
		else if (!strcmp(line, command))
			command_fn();
		else if (!strcmp(line, "quit"))
			break;
		else
			printf("UNKNOWN %s\n", line);
		fflush(stdout);
	}
	return 0;
}
