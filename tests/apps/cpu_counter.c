/*
 * cpu_counter.c - a CPU-only test process for dump/restore: every 10 ms it adds one
 * to a counter kept in its memory and appends the new value as a line to LOGFILE.
 *
 *   cpu_counter [--daemon] LOGFILE
 *
 * After a restore the next line is the value after the last one written before the
 * dump, which shows the memory came back (a fresh start would write 1 again). The
 * file is opened with O_APPEND, so restores after later writes still append
 * (CPU_COUNTER_NO_APPEND=1: opened as a shell's `>` does, which CRIU restores
 * only while the file keeps the size it had at the dump). With
 * --daemon it detaches (fork, setsid: its own session and group leader, parent init)
 * and prints the daemon's PID; without, it is a shell job of whoever started it.
 *
 * A second thread named "cuda-restore" only waits, standing in for the thread the
 * CUDA driver starts in every CUDA process to carry out checkpoint and restore:
 * the fake libcuda names it as the restore thread and requires it to run during a
 * restore, and logs whether the main thread was held stopped meanwhile.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void *restore_thread(void *arg)
{
	(void)arg;
	for (;;)
		pause();
	return NULL;
}

int main(int argc, char **argv)
{
	int daemon = argc == 3 && strcmp(argv[1], "--daemon") == 0;
	if (argc != 2 + daemon) {
		fprintf(stderr, "usage: cpu_counter [--daemon] LOGFILE\n");
		return 2;
	}
	const char *path = argv[1 + daemon];
	if (daemon) {
		pid_t pid = fork();
		if (pid < 0) {
			perror("fork");
			return 1;
		}
		if (pid > 0) {
			printf("%d\n", (int)pid);
			return 0;
		}
		setsid();
	}
	/* Only what the test means to be dumped: stdio on /dev/null, the log, nothing inherited. */
	int null = open("/dev/null", O_RDWR);
	if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0)
		return 1;
	close_range(3, ~0U, 0);
	const char *no_append = getenv("CPU_COUNTER_NO_APPEND");
	int mode = no_append && strcmp(no_append, "1") == 0 ? O_TRUNC : O_APPEND;
	int fd = open(path, O_WRONLY | O_CREAT | mode | O_CLOEXEC, 0600);
	if (fd < 0)
		return 1;
	pthread_t t;
	if (pthread_create(&t, NULL, restore_thread, NULL))
		return 1;
	pthread_setname_np(t, "cuda-restore");
	unsigned long long counter = 0;
	for (;;) {
		counter++;
		char line[32];
		int n = snprintf(line, sizeof(line), "%llu\n", counter);
		if (write(fd, line, (size_t)n) != n)
			return 1;
		struct timespec ts = { 0, 10 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
}
