/*
 * replay_main.c - the main() of a fuzz harness where libFuzzer is not used:
 * runs LLVMFuzzerTestOneInput once over every file named on the command line
 * (directories: every file in them, in name order; a missing path is
 * skipped). The seed corpus and the
 * saved crash inputs of each harness run this way in every build, under
 * ASan+UBSan in the sanitizer build, so a fixed crash stays fixed.
 *
 * Exits 0 after at least one input ran and none crashed (a crash aborts);
 * 1 when no input was found, since a replay of nothing proves nothing.
 */
#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static unsigned long replayed;

static void replay_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "replay: cannot open '%s': %s\n", path, strerror(errno));
		exit(1);
	}
	size_t cap = 4096, len = 0;
	uint8_t *buf = malloc(cap);
	size_t n;
	while (buf && (n = fread(buf + len, 1, cap - len, f)) > 0) {
		len += n;
		if (len == cap)
			buf = realloc(buf, cap *= 2);
	}
	fclose(f);
	if (!buf) {
		fprintf(stderr, "replay: out of memory reading '%s'\n", path);
		exit(1);
	}
	/* An exact-size copy, so ASan sees a read past the input's end. */
	uint8_t *input = malloc(len ? len : 1);
	memcpy(input, buf, len);
	free(buf);
	LLVMFuzzerTestOneInput(input, len);
	free(input);
	replayed++;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

static void replay_path(const char *path)
{
	struct stat st;
	if (stat(path, &st) < 0) {
		if (errno == ENOENT) /* a harness without saved crash inputs has no regress/ folder */
			return;
		fprintf(stderr, "replay: '%s': %s\n", path, strerror(errno));
		exit(1);
	}
	if (!S_ISDIR(st.st_mode)) {
		replay_file(path);
		return;
	}
	struct dirent **names;
	int n = scandir(path, &names, NULL, by_name);
	if (n < 0) {
		fprintf(stderr, "replay: cannot list '%s': %s\n", path, strerror(errno));
		exit(1);
	}
	for (int i = 0; i < n; i++) {
		char child[4096];
		snprintf(child, sizeof(child), "%s/%s", path, names[i]->d_name);
		struct stat cst;
		if (names[i]->d_name[0] != '.' && stat(child, &cst) == 0 && S_ISREG(cst.st_mode))
			replay_file(child);
		free(names[i]);
	}
	free(names);
}

int main(int argc, char **argv)
{
	LLVMFuzzerInitialize(&argc, &argv);
	for (int i = 1; i < argc; i++)
		replay_path(argv[i]);
	if (!replayed) {
		fprintf(stderr, "replay: no inputs found\n");
		return 1;
	}
	printf("replayed %lu inputs, no crash\n", replayed);
	return 0;
}
