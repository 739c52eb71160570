/*
 * cmd_help.c - `gpusnap help COMMAND`: the command's manual page, and the
 * hidden `gpusnap _doc` the build writes the pages with (cli_doc.c).
 *
 * The page is the one built beside this binary (build tree: doc/man1) or
 * installed with it (../share/man/man1), shown by man -l, so the page always
 * belongs to this gpusnap. Without man, or without the page, the usage from
 * the command's table is the answer.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli_doc.h"
#include "common/settings.h"

static const char *const help_usage[] = {
	"gpusnap help [COMMAND]",
	NULL,
};

const struct cli_doc help_doc = {
	.args = "COMMAND",
	.description = "Shows COMMAND's manual page, gpusnap-COMMAND(1), with man: the page built beside the gpusnap "
		       "binary (doc/man1 in the build tree) or installed with it (../share/man/man1). Where man or the page "
		       "is missing, prints the command's usage and options instead. Without COMMAND, lists the "
		       "commands.",
	.exits = (const struct cli_doc_exit[]){ { GS_E_USAGE, "COMMAND is not a gpusnap command" }, { 0, NULL } },
	.examples = (const struct cli_doc_example[]){ { "gpusnap help dump", "Read the manual page of gpusnap dump." },
						      { NULL, NULL } },
};

/* The page file of `page` that belongs to this binary, into buf; -1 if there is none. */
static int find_page(const char *page, char *buf, size_t n)
{
	char self[PATH_MAX];
	ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (len <= 0)
		return -1;
	self[len] = '\0';
	char *slash = strrchr(self, '/');
	if (slash)
		*slash = '\0';
	static const char *const where[] = { "%s/doc/man1/%s.1", "%s/../share/man/man1/%s.1",
					     "%s/../share/man/man1/%s.1.gz" };
	for (size_t i = 0; i < sizeof(where) / sizeof(where[0]); i++) {
		struct stat st;
		if ((size_t)snprintf(buf, n, where[i], self, page) < n && !stat(buf, &st) && S_ISREG(st.st_mode))
			return 0;
	}
	return -1;
}

static bool have_man(void)
{
	const char *path = getenv("PATH");
	if (!path)
		return false;
	for (const char *p = path; *p;) {
		size_t len = strcspn(p, ":");
		char f[PATH_MAX];
		if ((size_t)snprintf(f, sizeof(f), "%.*s/man", (int)len, p) < sizeof(f) && !access(f, X_OK))
			return true;
		p += len;
		p += *p == ':';
	}
	return false;
}

int cmd_help(int argc, char **argv)
{
	const struct gs_option opts[] = { GS_OPT_END_() };
	int nargs;
	int rc = cli_parse(argc, argv, opts, help_usage, 0, &nargs);
	if (rc)
		return rc == GS_PARSE_HELP ? 0 : rc;
	if (nargs > 1)
		return cli_usage_error("help", "unexpected argument '%s'", argv[1]);
	const struct cli_command *c = nargs ? cli_find_command(argv[0]) : NULL;
	if (nargs && !c)
		return cli_usage_error("help", "'%s' is not a gpusnap command", argv[0]);
	char page[64], file[PATH_MAX];
	snprintf(page, sizeof(page), "gpusnap%s%s", c ? "-" : "", c ? c->name : "");
	if (have_man() && !find_page(page, file, sizeof(file))) {
		fflush(stdout);
		execlp("man", "man", "-l", file, (char *)NULL);
		/* man is there but would not start: the usage below is still an answer */
	}
	if (!c) {
		printf("usage: gpusnap <command> [<options>] [<args>]\n\n");
		for (int i = 0; i < cli_ncommands; i++)
			printf("    %-15s %s\n", cli_commands[i].name, cli_commands[i].summary);
		return 0;
	}
	char name[64], help[] = "-h";
	snprintf(name, sizeof(name), "%s", c->name);
	char *args[] = { name, help, NULL };
	return c->run(2, args);
}

/* Writes the output of fn(f, err) to the file dir/name. 0, or an error reported. */
static int write_file(const char *dir, const char *name, int (*fn)(FILE *, const struct cli_command *, struct gs_err *),
		      const struct cli_command *c)
{
	struct gs_err err = { 0 };
	char path[PATH_MAX];
	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path)) {
		gs_fail(&err, GS_E_USAGE, "'%s' is too long a path", dir);
		return cli_report_error(&err);
	}
	FILE *f = fopen(path, "w");
	if (!f) {
		gs_fail_errno(&err, GS_E_FAILURE, errno, "cannot write '%s'", path);
		return cli_report_error(&err);
	}
	int rc = fn(f, c, &err);
	if (fclose(f) && !rc)
		rc = gs_fail_errno(&err, GS_E_FAILURE, errno, "cannot write '%s'", path);
	return rc ? cli_report_error(&err) : 0;
}

static int bash_file(FILE *f, const struct cli_command *c, struct gs_err *err)
{
	(void)c;
	return cli_completion_script(f, "bash", err);
}

static int zsh_file(FILE *f, const struct cli_command *c, struct gs_err *err)
{
	(void)c;
	return cli_completion_script(f, "zsh", err);
}

static int make_dir(const char *dir, const char *sub)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s%s%s", dir, *sub ? "/" : "", sub);
	if (mkdir(path, 0755) && errno != EEXIST) {
		struct gs_err err = { 0 };
		gs_fail_errno(&err, GS_E_FAILURE, errno, "cannot create '%s'", path);
		return cli_report_error(&err);
	}
	return 0;
}

/*
 * `gpusnap _doc man [COMMAND]`: a page on stdout. `gpusnap _doc write DIR`:
 * every page into DIR/man1 and the completion scripts into DIR/bash and
 * DIR/zsh, what the build installs, so it needs no list of commands of its own.
 */
int cmd_doc(int argc, char **argv)
{
	struct gs_err err = { 0 };
	if (argc == 2 && !strcmp(argv[1], "man"))
		return cli_doc_man(stdout, NULL, &err);
	if (argc == 3 && !strcmp(argv[1], "man")) {
		const struct cli_command *c = cli_find_command(argv[2]);
		if (!c)
			return cli_usage_error("_doc", "'%s' is not a gpusnap command", argv[2]);
		return cli_doc_man(stdout, c, &err) ? cli_report_error(&err) : 0;
	}
	if (argc == 3 && !strcmp(argv[1], "write")) {
		const char *dir = argv[2];
		char sub[PATH_MAX];
		int rc = make_dir(dir, "");
		for (const char *s = "man1\0bash\0zsh\0"; !rc && *s; s += strlen(s) + 1)
			rc = make_dir(dir, s);
		snprintf(sub, sizeof(sub), "%s/man1", dir);
		for (int i = -1; !rc && i < cli_ncommands; i++) {
			char name[64];
			snprintf(name, sizeof(name), "gpusnap%s%s.1", i < 0 ? "" : "-", i < 0 ? "" : cli_commands[i].name);
			rc = write_file(sub, name, cli_doc_man, i < 0 ? NULL : &cli_commands[i]);
		}
		snprintf(sub, sizeof(sub), "%s/bash", dir);
		if (!rc)
			rc = write_file(sub, "gpusnap", bash_file, NULL);
		snprintf(sub, sizeof(sub), "%s/zsh", dir);
		if (!rc)
			rc = write_file(sub, "_gpusnap", zsh_file, NULL);
		return rc;
	}
	/* README.md's table of variables; t7060 checks the README holds this */
	if (argc == 2 && !strcmp(argv[1], "settings")) {
		gs_settings_markdown(stdout);
		return 0;
	}
	return cli_usage_error("_doc", "expected 'man [COMMAND]', 'write DIR' or 'settings'");
}
