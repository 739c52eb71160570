/*
 * cli_doc.c - the manual pages, written from the tables the parser uses.
 *
 * A command's options live in a table local to its cmd_*.c, filled with
 * pointers to its own variables. Rather than a second copy for the
 * documentation, which would drift, the command is run as `CMD -h` with
 * cli_parse_hook set: cli_parse hands the table over instead of parsing (git's
 * parse-options answers --git-completion-helper the same way). The page adds
 * what a table cannot say, from the command's struct cli_doc; the variables
 * and exit codes are described once, here, for every page.
 */
#include "cli/cli_doc.h"

#include <stdlib.h>
#include <string.h>

/* The variables gpusnap and its agent read that a user may set; a command's doc names those it reads. */
static const struct {
	const char *name, *text;
} env_vars[] = {
	{ "GPUSNAP_LOG", "how much gpusnap says on stderr: error, warn (the default), info or debug" },
	{ "GPUSNAP_LIBCUDA", "the driver library to load instead of libcuda.so.1 (the tests' fake driver)" },
	{ "GPUSNAP_RUN_DIR",
	  "the runtime directory of agent sockets, locks and records (default /run/gpusnap for root, else "
	  "/tmp/gpusnap-UID)" },
	{ "GPUSNAP_CRIU", "the criu binary to run (default: criu on PATH; CRIU 4.2 or later)" },
	{ "GPUSNAP_CRIU_TIMEOUT", "seconds each criu run may take before it is killed (default 600)" },
	{ "GPUSNAP_AGENT", "the agent, libgpusnap.so, to use (default: beside the gpusnap binary, or in ../lib)" },
	{ "GPUSNAP_RESERVE", "in the app: staging host memory kept ready for suspends (what --reserve sets)" },
	{ "GPUSNAP_AGENT_HOOKS", "in the app: 0 leaves allocations to the driver (for legacy CUDA IPC)" },
	{ "GPUSNAP_AGENT_LOG", "in the app: the file the agent logs to" },
	{ "GPUSNAP_STAGING_MODE", "in the app: bounce (the default) or pinned staging memory" },
	{ "GPUSNAP_STAGING_THREADS", "in the app: threads that copy between the GPU and the staging memory" },
	{ "GPUSNAP_IO_THREADS", "in the app: threads that stream GPU data to and from image files" },
	{ "GPUSNAP_HOST_MEMORY_LIMIT", "in the app: the most host memory a suspend without --reserve may take" },
	{ "GPUSNAP_ALLOW_IO_URING", "in the app: 1 lets the app set up io_uring (which CRIU cannot dump)" },
	{ "GPUSNAP_FORK_DROP_DEVICE", "in the app: 0 lets fork children keep the GPU device files (they cannot be dumped)" },
};

/* The exit codes (err.h; README.md's table says what becomes of the process for each). */
static const char *const exit_meaning[] = {
	[GS_OK] = "done",
	[GS_E_FAILURE] = "the driver or the system failed; the message says how",
	[GS_E_USAGE] = "bad command line",
	[GS_E_NO_PROCESS] = "no such process",
	[GS_E_NOT_CUDA] = "the process does not use CUDA",
	[GS_E_PERMISSION] = "not allowed to act on that process or file",
	[GS_E_STATE] = "the process is in the wrong state: already suspended, not suspended, stopped, or busy with "
		       "another gpusnap",
	[GS_E_NO_DRIVER] = "no NVIDIA driver or no GPU",
	[GS_E_DRIVER_OLD] = "the driver lacks the checkpoint API (< 570) or GPU remap (< 580)",
	[GS_E_TIMEOUT] = "a deadline passed (GPU work, a criu run); the process was left running",
	[GS_E_GPU_MAP] = "a --map is invalid, incomplete or refused; the process stays suspended",
	[GS_E_IMAGE] = "an image is missing, incomplete, corrupt or of an unknown version",
	[GS_E_GPU_MISMATCH] = "an image or map targets a GPU of another type",
	[GS_E_NO_SPACE] = "disk or host memory full",
	[GS_E_NO_VRAM] = "not enough free GPU memory",
	[GS_E_CRIU] = "CRIU missing, too old, or failed, or the process holds what CRIU cannot dump",
	[GS_E_AGENT] = "the preloaded agent refused, failed or did not answer",
	[GS_E_PARTIAL] = "--tree: some processes were handled, some not (each is named)",
};

const struct cli_command *cli_find_command(const char *name)
{
	for (int i = 0; i < cli_ncommands; i++)
		if (!strcmp(cli_commands[i].name, name))
			return &cli_commands[i];
	return NULL;
}

static struct cli_table *capture_into;
static int capture_failed;

static void capture(const struct gs_option *opts, const char *const *usage, int flags)
{
	int n = 0;
	while (opts[n].type != GS_OPT_END)
		n++;
	struct gs_option *copy = calloc((size_t)n + 1, sizeof(*copy));
	if (!copy) {
		capture_failed = 1;
		return;
	}
	memcpy(copy, opts, sizeof(*copy) * (size_t)n);
	for (int i = 0; i < n; i++)
		copy[i].value = NULL; /* the command's variables are gone once it returns */
	free(capture_into->opts);
	capture_into->opts = copy;
	capture_into->usage = usage;
	capture_into->flags = flags;
}

int cli_doc_table(const struct cli_command *c, struct cli_table *t, struct gs_err *err)
{
	char name[64], help[] = "-h";
	snprintf(name, sizeof(name), "%s", c->name);
	char *argv[] = { name, help, NULL };
	memset(t, 0, sizeof(*t));
	capture_into = t;
	capture_failed = 0;
	cli_parse_hook = capture;
	c->run(2, argv);
	cli_parse_hook = NULL;
	capture_into = NULL;
	if (capture_failed || !t->opts) {
		cli_table_free(t);
		return gs_fail(err, GS_E_FAILURE, "internal error: command '%s' showed no option table", c->name);
	}
	return 0;
}

void cli_table_free(struct cli_table *t)
{
	free(t->opts);
	t->opts = NULL;
}

/*
 * Text into roff: a backslash is \e, a minus \- (so options copied from the
 * page work), and a line may not begin with a control character.
 */
static void roff(FILE *out, const char *s)
{
	bool line_start = true;
	for (; *s; s++) {
		if (line_start && (*s == '.' || *s == '\''))
			fputs("\\&", out);
		line_start = *s == '\n';
		if (*s == '\\')
			fputs("\\e", out);
		else if (*s == '-')
			fputs("\\-", out);
		else
			fputc(*s, out);
	}
}

/* Paragraphs separated by a blank line, each its own .PP. */
static void roff_paragraphs(FILE *out, const char *text)
{
	while (*text) {
		const char *end = strstr(text, "\n\n");
		size_t len = end ? (size_t)(end - text) : strlen(text);
		char *p = strndup(text, len);
		if (!p)
			return;
		fputs(".PP\n", out);
		roff(out, p);
		fputc('\n', out);
		free(p);
		text += len;
		while (*text == '\n')
			text++;
	}
}

static void upper(char *dst, size_t n, const char *src)
{
	size_t i = 0;
	for (; src[i] && i + 1 < n; i++)
		dst[i] = (char)(src[i] >= 'a' && src[i] <= 'z' ? src[i] - 'a' + 'A' : src[i]);
	dst[i] = '\0';
}

static void header(FILE *out, const char *page, const char *summary)
{
	char title[64];
	upper(title, sizeof(title), page);
	fprintf(out, ".\\\" generated by gpusnap _doc man from its option tables; edit src/cli, not this file\n");
	fprintf(out, ".TH %s 1 \"\" \"gpusnap %s\" \"gpusnap Manual\"\n", title, GPUSNAP_VERSION);
	/* neither hyphenated nor justified: option names, paths and variables stay whole and findable */
	fputs(".nh\n.ad l\n", out);
	fputs(".SH NAME\n", out);
	roff(out, page);
	fputs(" \\- ", out);
	roff(out, summary);
	fputc('\n', out);
}

/* `.B --dir DIR`, in the page's words: the option's names in bold, its argument in italics. */
static void option_item(FILE *out, const struct gs_option *o)
{
	fputs(".TP\n", out);
	if (o->short_name)
		fprintf(out, "\\fB\\-%c\\fR%s", o->short_name, o->long_name ? ", " : "");
	if (o->long_name) {
		fputs("\\fB\\-\\-", out);
		roff(out, o->long_name);
		fputs("\\fR", out);
	}
	if (o->argh) {
		fputs(" \\fI", out);
		roff(out, o->argh);
		fputs("\\fR", out);
	}
	fputc('\n', out);
	roff(out, o->help ? o->help : "");
	fputc('\n', out);
}

static int env_index(const char *name, size_t len)
{
	for (size_t i = 0; i < sizeof(env_vars) / sizeof(env_vars[0]); i++)
		if (strlen(env_vars[i].name) == len && !strncmp(env_vars[i].name, name, len))
			return (int)i;
	return -1;
}

static void env_item(FILE *out, int i)
{
	fprintf(out, ".TP\n\\fB");
	roff(out, env_vars[i].name);
	fprintf(out, "\\fR\n");
	roff(out, env_vars[i].text);
	fputc('\n', out);
}

static void exit_item(FILE *out, int code, const char *text)
{
	fprintf(out, ".TP\n\\fB%d\\fR (%s)\n", code, gs_exit_name(code));
	roff(out, text);
	fputc('\n', out);
}

/* GS_E_INTERRUPTED_BASE in a doc's exits: the codes 128 + N of the commands that undo what they began on a signal. */
static void interrupted_item(FILE *out)
{
	fputs(".TP\n\\fB128 + N\\fR (interrupted)\nsignal N (SIGINT, SIGTERM, SIGHUP) came before the point of no "
	      "return, and what had begun was undone\n",
	      out);
}

static int command_page(FILE *out, const struct cli_command *c, struct gs_err *err)
{
	const struct cli_doc *d = c->doc;
	struct cli_table t;
	int rc = cli_doc_table(c, &t, err);
	if (rc)
		return rc;
	char page[64];
	snprintf(page, sizeof(page), "gpusnap-%s", c->name);
	header(out, page, c->summary);
	fputs(".SH SYNOPSIS\n", out);
	for (int i = 0; t.usage[i]; i++)
		if (!strncmp(t.usage[i], "gpusnap ", 8)) {
			fputs(".PP\n\\fBgpusnap ", out);
			roff(out, c->name);
			fputs("\\fR", out);
			roff(out, t.usage[i] + 8 + strlen(c->name));
			fputc('\n', out);
		}
	fputs(".SH DESCRIPTION\n", out);
	roff_paragraphs(out, d->description);
	fputs(".SH OPTIONS\n", out);
	for (const struct gs_option *o = t.opts; o->type != GS_OPT_END; o++)
		option_item(out, o);
	option_item(out, &(struct gs_option){ GS_OPT_BOOL, 'h', "help", NULL, NULL, "show the usage and the options" });
	cli_table_free(&t);

	fputs(".SH EXIT STATUS\n", out);
	exit_item(out, 0, exit_meaning[0]);
	for (const struct cli_doc_exit *e = d->exits; e && e->text; e++) {
		if (e->code == GS_E_INTERRUPTED_BASE) {
			interrupted_item(out);
			continue;
		}
		if (e->code <= 0 || e->code > GS_E_PARTIAL)
			return gs_fail(err, GS_E_FAILURE, "internal error: %s's doc names exit code %d", c->name, e->code);
		exit_item(out, e->code, *e->text ? e->text : exit_meaning[e->code]);
	}

	if (d->env && *d->env) {
		fputs(".SH ENVIRONMENT\n", out);
		for (const char *p = d->env; *p;) {
			size_t len = strcspn(p, " ");
			int i = env_index(p, len);
			if (i < 0)
				return gs_fail(err, GS_E_FAILURE, "internal error: %s's doc names an undescribed variable '%.*s'",
					       c->name, (int)len, p);
			env_item(out, i);
			p += len;
			p += strspn(p, " ");
		}
	}
	if (d->examples && d->examples->command) {
		fputs(".SH EXAMPLES\n", out);
		for (const struct cli_doc_example *x = d->examples; x->command; x++) {
			fputs(".PP\n", out);
			roff(out, x->text);
			fputs("\n.PP\n.RS 4\n.nf\n\\fB$ ", out);
			roff(out, x->command);
			fputs("\\fR\n.fi\n.RE\n", out);
		}
	}
	fputs(".SH SEE ALSO\n\\fBgpusnap\\fR(1)\n", out);
	return 0;
}

static void main_page(FILE *out)
{
	header(out, "gpusnap", "checkpoint and restore CUDA processes");
	fputs(".SH SYNOPSIS\n.nf\n\\fBgpusnap\\fR \\fICOMMAND\\fR [\\fIOPTIONS\\fR] [\\fIARGS\\fR]\n"
	      "\\fBgpusnap\\fR \\-\\-version\n\\fBgpusnap help\\fR \\fICOMMAND\\fR\n.fi\n", out);
	fputs(".SH DESCRIPTION\n", out);
	roff_paragraphs(out,
			"gpusnap takes a CUDA process's GPU state off the GPU and puts it back (suspend, resume), and "
			"writes a whole process, CPU and GPU, into an image directory that brings it back later or on "
			"another machine (dump, restore, with CRIU).\n\n"
			"A process started with `gpusnap run` carries the gpusnap agent (libgpusnap.so, preloaded) and "
			"takes the fast path, where the agent moves its GPU data; any other CUDA process takes the "
			"driver's checkpoint path. The CRIU plugin gpusnap_criu.so, in CRIU's plugin folder, lets a plain "
			"criu dump and restore (what runc, Podman and CRI-O run) carry the GPU state too.");
	fputs(".SH COMMANDS\n", out);
	for (int i = 0; i < cli_ncommands; i++) {
		fprintf(out, ".TP\n\\fBgpusnap\\-");
		roff(out, cli_commands[i].name);
		fputs("\\fR(1)\n", out);
		roff(out, cli_commands[i].summary);
		fputc('\n', out);
	}
	fputs(".SH OPTIONS\n.TP\n\\fB\\-\\-version\\fR\nprint gpusnap's version\n"
	      ".TP\n\\fB\\-h\\fR, \\fB\\-\\-help\\fR\nlist the commands\n", out);
	fputs(".SH EXIT STATUS\nEvery error is one line on stderr, \\fIgpusnap: what failed and why\\fR, and one of "
	      "these codes.\n", out);
	for (int code = 0; code <= GS_E_PARTIAL; code++)
		exit_item(out, code, exit_meaning[code]);
	interrupted_item(out);
	fputs(".SH ENVIRONMENT\n", out);
	for (size_t i = 0; i < sizeof(env_vars) / sizeof(env_vars[0]); i++)
		env_item(out, (int)i);
	fputs(".SH FILES\n.TP\n\\fI/usr/lib/criu/gpusnap_criu.so\\fR\nthe CRIU plugin; CRIU loads every plugin of "
	      "its plugin folder\n.TP\n\\fI/run/gpusnap\\fR\nagent sockets, locks and records (root)\n", out);
	fputs(".SH SEE ALSO\n", out);
	for (int i = 0; i < cli_ncommands; i++) {
		fprintf(out, "\\fBgpusnap\\-");
		roff(out, cli_commands[i].name);
		fputs("\\fR(1),\n", out);
	}
	fputs("\\fBcriu\\fR(8)\n", out);
}

int cli_doc_man(FILE *out, const struct cli_command *c, struct gs_err *err)
{
	if (!c) {
		main_page(out);
		return 0;
	}
	return command_page(out, c, err);
}
