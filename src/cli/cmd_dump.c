/*
 * cmd_dump.c - `gpusnap dump PID -D DIR`: writes a CUDA process's GPU state
 * and CPU state (CRIU) into an image directory; the process is gone
 * afterwards, or runs on with --leave-running.
 *
 * Driver path: driver lock + checkpoint (the GPU data moves into the
 * process's host memory), a manifest without data (how=driver), CRIU dumps
 * the process with that host copy into cpu/. Agent path: the agent streams
 * the data from the GPU into the image through a small pinned ring and
 * releases the GPU memory (older agents: suspend into staging memory as large
 * as the data, write the image from there, free it), then the driver
 * checkpoints the rest and CRIU dumps the process.
 * Either way the image is built under a temporary name and published at DIR
 * only once CRIU succeeded. Any failure before that undoes the steps in
 * reverse, so the process runs on; docs/DESIGN.md, "Dump and restore through CRIU".
 * --tree (a whole process tree, ranks sharing GPU memory) is dump_tree.c's.
 *
 * The process is locked for the dump (op_lock.h) and each step is recorded
 * with what to do should gpusnap be killed there. An ending signal is
 * obeyed between steps (interrupt.h): before CRIU has dumped the process the
 * dump is undone, after that it is finished (CRIU may have killed the
 * process: its image must be published).
 */
#define LOG_PREFIX "dump: "
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/agent_client.h"
#include "cli/cli.h"
#include "cli/cli_criu.h"
#include "cli/dump_common.h"
#include "cli/dump_tree.h"
#include "cli/interrupt.h"
#include "cli/op_lock.h"
#include "cli/spill.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/proc.h"
#include "common/settings.h"
#include "common/util.h"
#include "core/hostmem.h"
#include "core/protocol.h"
#include "criu/criu.h"
#include "cuda/checkpoint.h"
#include "image/codec.h"
#include "image/image.h"
#include "image/image_fs.h"
#include "image/manifest.h"
#include "image/store.h"

static const char *const dump_usage[] = {
	"gpusnap dump [--tree] [--leave-running] [--timeout SECONDS] [--driver] [--tcp-close | --tcp-established] "
	"[--replace] [--compress CODEC[:LEVEL]] [--parent PARENT_DIR | --store STORE [--keep K]] [--json] -D DIR PID",
	NULL,
};

const struct cli_doc dump_doc = {
	.args = "PID",
	.description =
		"Writes process PID, its GPU state and (with CRIU) its CPU state, into the image directory DIR; "
		"gpusnap restore brings it back from there, on this machine or another with the same GPU type. "
		"The process is gone afterwards, unless --leave-running.\n\n"
		"The image is written under a temporary name and published (fsync, checksums, rename) only when it "
		"is complete, so DIR holds the previous image or the new one, never half of one. A dump that fails "
		"before CRIU took the process is undone: the process runs on.\n\n"
		"With --leave-running, a process under the gpusnap agent stands still only while its GPU data is "
		"copied into memory of the dump's own (GPUSNAP_STAGE_DIR, a tmpfs, where it has room), the driver "
		"and CRIU take it and it gets its data back; the image is written from that copy after it runs "
		"again, and the command returns once the image is published (with --tree, a copy per process of the "
		"tree).\n\n"
		"With --store STORE, the GPU data's chunks go into the chunk store STORE, shared by the images "
		"written into it: a chunk the store holds already (found by its fingerprint, computed on the GPU) is "
		"neither copied nor written again, and DIR holds only the manifest and CRIU's files. Remove images "
		"with rm -r and run gpusnap gc STORE to free what no image uses, or let --keep K do it: once DIR is "
		"published, the newest K images of this process in STORE beside DIR stay, the older are removed "
		"and STORE is collected. --store takes neither --parent nor --driver; with --tree each process's image "
		"goes into STORE.\n\n"
		"CRIU 4.2 or later must be installed (or named by GPUSNAP_CRIU), and dumping needs root or "
		"CAP_CHECKPOINT_RESTORE.",
	.exits = (const struct cli_doc_exit[]){ { GS_E_FAILURE, "an I/O error writing the image; DIR stays as it was" },
						{ GS_E_USAGE, "bad options; DIR not an image and not empty; DIR the image of "
							      "another process without --replace; --store STORE not a chunk "
							      "store, or with --parent or --driver" },
						{ GS_E_NO_PROCESS, "" }, { GS_E_NOT_CUDA, "" },
						{ GS_E_PERMISSION, "an image path that others could change (named)" },
						{ GS_E_STATE, "the process is suspended, or another gpusnap is at work on it or "
							      "on DIR (named)" },
						{ GS_E_NO_DRIVER, "" }, { GS_E_DRIVER_OLD, "" },
						{ GS_E_TIMEOUT, "GPU work or a criu run did not finish in time" },
						{ GS_E_NO_SPACE, "disk full; the process runs on, DIR stays as it was" },
						{ GS_E_CRIU, "CRIU missing, too old or failed (its kept log is named); or the "
							     "tree holds what CRIU cannot dump: an io_uring, a TCP connection "
							     "to outside it without --tcp-close or --tcp-established" },
						{ GS_E_AGENT, "" }, { GS_E_INTERRUPTED_BASE, "" }, { 0, NULL } },
	.env = "GPUSNAP_CRIU GPUSNAP_CRIU_TIMEOUT GPUSNAP_STAGE_DIR GPUSNAP_STORE GPUSNAP_LOG GPUSNAP_LIBCUDA GPUSNAP_RUN_DIR",
	.examples = (const struct cli_doc_example[]){
		{ "gpusnap dump -D /ckpt/job 1234", "Dump process 1234 into /ckpt/job; it is gone afterwards." },
		{ "gpusnap dump --tree --leave-running -D /ckpt/job $JOB_PID",
		  "A periodic checkpoint of a whole job, which keeps running." },
		{ "gpusnap dump --leave-running --store /ckpt/store -D /ckpt/series/$(date -u +%Y%m%dT%H%M%SZ) 1234",
		  "One checkpoint of a series whose images share their equal chunks in /ckpt/store (gpusnap gc)." },
		{ NULL, NULL } },
};

#define DEFAULT_LOCK_TIMEOUT_S 30.0

struct dump_opts {
	const char *dir;
	double timeout;
	bool tree, leave_running, driver_only, json, tcp_close, tcp_established, replace;
	bool multi_gpu_driver; /* --multi-gpu-driver */
	const char *compress_arg; /* --compress, parsed into compress */
	struct gs_compress compress;
	const char *parent;     /* --parent, absolute */
	char parent_rec[4096];  /* the parent's path as the image records it: relative when beside DIR */
	const char *store;      /* --store (or GPUSNAP_STORE), absolute once checked */
	char store_rec[4096];   /* the store's path as the image records it: relative when beside DIR */
	char store_ref[64];     /* the dump's ref in the store */
	struct gs_store *st;    /* open, holding the ref, from the checks to the end */
	int keep;               /* --keep K: with --store, the newest K images of the series beside DIR stay */
};

struct dump_run {
	pid_t pid;
	char comm[64];
	struct cli_session s;
	struct cli_agent agent;
	struct gs_criu criu;
	struct cli_op *lock;
	struct cli_op_record left; /* what a killed gpusnap left on the process, if anything */
	struct gs_image_tmp *tmp;
	char cpu_dir[4096];
	struct gs_ckpt_proc proc;
	uint64_t vram[CLI_MAX_GPUS];
	uint64_t gpu_mask;
	/* what has been done, for undoing it */
	bool agent_suspended, agent_dumped, driver_suspended, published;
	bool streamed;   /* the agent streamed the data (no staging copy) */
	bool keep_tmp;   /* the agent could not take its data back: its only copy is in the temporary image */
	bool agent_stuck; /* the agent's own undo of a failed dump failed: it stayed suspended, data in the image */
	bool undo_failed; /* a step could not be undone (said on stderr) */
	bool data_in_tmp; /* the agent's GPU data is (or is being) written to the temporary image */
	bool kept_listed; /* the image kept_tmp_image kept holds the checksums of CRIU's files */
	/* timings */
	double agent_suspend_s, agent_write_s, criu_s, publish_s, resume_s, total_s;
	/* --leave-running: from the first step that holds the process (agent or driver) to its resume */
	double stopped_at, paused_s;
	uint64_t gpu_bytes, ring_bytes;
	uint64_t gpu_zero_bytes; /* streamed dump: bytes the agent found all zero on the GPU (never copied) */
	/*
	 * --leave-running: the dump's own copy of the GPU data in memory (the
	 * stage, image.h), written into the image once the process runs again;
	 * NULL where there was no room for it (the data goes into the image
	 * inside the pause, as before the stage)
	 */
	struct gs_image_stage *stage;
	char no_stage[GS_ERR_MSG_MAX]; /* why there is no stage, for --json */
	uint64_t stage_bytes;          /* written into the image from the stage */
	bool keep_stage;               /* the stage holds a suspended process's only copy of its data */
	double stage_write_s;
	uint64_t parent_bytes;   /* dump --parent: bytes equal to the parent's, left there (never copied) */
	uint64_t copied_bytes;   /* streamed dump: bytes the agent copied from the GPU (counted as they arrived) */
	uint64_t store_bytes;    /* dump --store: bytes whose object the store held, left there (never copied) */
	uint64_t store_new_objects; /* dump --store: objects this dump wrote into the store */
	struct gs_store *store;  /* dump --store: its ref names the kept image should one be kept */
	bool kept;               /* the image was kept under another name */
	/* --keep: older images of the series removed, and what the gc after it freed */
	uint64_t keep_removed, keep_gc_objects, keep_gc_bytes;
};

/* Where the agent's GPU data is once it dumped it: the stage or the temporary image. */
static const char *data_dir(const struct dump_run *r)
{
	return r->stage ? gs_image_stage_path(r->stage) : gs_image_tmp_path(r->tmp);
}

/* Resumes the agent with its data read from dir (by descriptor where it takes one). */
static int agent_resume_from(struct dump_run *r, const char *dir, struct gs_err *err)
{
	return r->stage && dir ? cli_agent_resume_image(r->pid, &r->agent, dir, false, false, err)
			       : cli_agent_resume_from(r->pid, &r->agent, dir, false, err);
}

/*
 * Gives up the temporary image under a kept name (gs_image_tmp_keep; where
 * that rename fails, said on stderr, the image stays at its temporary name)
 * and leaves the process's record for the next command to repeat: how to
 * bring the process back from the kept image, by restore when the dump
 * ended it (process_gone), by resume when it stays suspended. kept (n
 * bytes) gets the image's path.
 */
static void keep_tmp_image(struct dump_run *r, const char *dir, bool process_gone, char *kept, size_t n)
{
	struct gs_err ke = { 0 };
	r->kept_listed = gs_image_tmp_cpu_listed(r->tmp);
	r->kept = true;
	if (gs_image_tmp_keep(r->tmp, kept, n, &ke))
		fprintf(stderr, "gpusnap: %s\n", ke.msg);
	r->tmp = NULL; /* freed by gs_image_tmp_keep */
	struct gs_err se = { 0 };
	/* its STORED chunks' objects stay for the kept image: the dump's ref names it from now on */
	if (r->store && gs_store_ref_set_image(r->store, kept, &se))
		fprintf(stderr, "gpusnap: %s\n", se.msg);
	char how[GS_ERR_MSG_MAX];
	if (process_gone)
		snprintf(how, sizeof(how), "process %d was dumped, but its image could not be put at '%s' and is kept at "
			 "'%s': %s -D '%s' brings it back", (int)r->pid, dir, kept, dump_restore_cmd(r->kept_listed), kept);
	else
		snprintf(how, sizeof(how), "process %d stays suspended after a failed dump; its GPU data is kept in '%s': "
			 "gpusnap resume %d puts it back", (int)r->pid, kept, (int)r->pid);
	cli_op_leave(r->lock, kept, process_gone ? NULL : how, process_gone ? how : NULL);
}

/* The driver path's manifest: GPUs, no allocations (CRIU's pages carry the data), metadata. */
static int write_driver_manifest(struct dump_run *r, struct gs_err *err)
{
	struct gs_image_writer_opts wo = { .source_pid = r->pid, .source_comm = r->comm, .how = "driver" };
	struct gs_image_writer *w;
	int rc = gs_image_writer_open_in(gs_image_tmp_path(r->tmp), &wo, &w, err);
	if (rc)
		return rc;
	if ((rc = dump_add_gpus(w, &r->s, r->gpu_mask, err)) || (rc = dump_set_metadata(w, &r->s, r->vram, r->gpu_mask, err))) {
		gs_image_writer_abort(w);
		return rc;
	}
	return gs_image_writer_seal(w, err);
}

/* Brings the process back to running after a failure before the image was published. */
static void undo(struct dump_run *r)
{
	struct gs_err e = { 0 };
	if (r->driver_suspended) {
		if (gs_ckpt_resume(&r->s.cu, &r->proc, 1, NULL, 0, &e)) {
			fprintf(stderr, "gpusnap: could not put process %d back on the GPU: %s\n", (int)r->pid, e.msg);
			r->undo_failed = true;
		}
		r->driver_suspended = false;
	}
	if (r->agent_suspended) {
		/* the staging memory was freed after the agent wrote the image: it reads the data back from there */
		const char *from = r->agent_dumped ? data_dir(r) : NULL;
		if (agent_resume_from(r, from, &e)) {
			fprintf(stderr, "gpusnap: %s\n", e.msg);
			/* the process stays suspended; the image is where its GPU data is: keep it */
			r->keep_tmp = from != NULL;
			r->undo_failed = true;
		} else if (r->agent_stuck) {
			fprintf(stderr, "gpusnap: process %d took its GPU data back from the temporary image and runs on\n",
				(int)r->pid);
		}
		r->agent_suspended = false;
	}
}

/*
 * Records the step the dump is at, with what to tell the user should gpusnap
 * be killed there (op_lock.h): while the process exists it is suspended
 * (the driver and/or the agent hold it) unless CRIU's dump went through.
 */
enum dump_step { STEP_AGENT, STEP_DRIVER, STEP_CRIU, STEP_PUBLISH, STEP_FINISH };

/* What the user asked for the tree's TCP connections (criu.c's gs_criu_tcp_plan decides from it). */
static enum gs_criu_tcp tcp_asked(const struct dump_opts *o)
{
	return o->tcp_close ? GS_CRIU_TCP_CLOSE : o->tcp_established ? GS_CRIU_TCP_ESTABLISHED : GS_CRIU_TCP_REFUSE;
}

static void record_step(struct dump_run *r, const struct dump_opts *o, enum dump_step step)
{
	static const char *const names[] = { "agent", "driver", "criu", "publish", "finish" };
	char alive[GS_ERR_MSG_MAX], gone[GS_ERR_MSG_MAX];
	const char *tmp = gs_image_tmp_path(r->tmp);
	/* where the agent's GPU data is should gpusnap die here: the image being written, then the published one */
	const char *data = r->data_in_tmp ? data_dir(r) : NULL;
	int me = (int)getpid(), pid = (int)r->pid;
	gone[0] = '\0';
	switch (step) {
	case STEP_AGENT:
	case STEP_DRIVER:
		snprintf(alive, sizeof(alive), "process %d was left suspended by a gpusnap dump (pid %d) that was killed; "
			 "gpusnap resume %d puts it back", pid, me, pid);
		break;
	case STEP_CRIU:
		snprintf(alive, sizeof(alive), "process %d was left suspended by a gpusnap dump (pid %d) that was killed "
			 "while CRIU dumped it; gpusnap resume %d puts it back", pid, me, pid);
		/* CRIU may have finished after gpusnap died, which then never wrote the checksums of CRIU's files */
		snprintf(gone, sizeof(gone), "CRIU dumped process %d for a gpusnap dump (pid %d) that was killed before it "
			 "published the image at '%s' or checksummed CRIU's files: check '%s' with gpusnap inspect --verify "
			 "--allow-unverified-cpu, then gpusnap restore --allow-unverified-cpu -D '%s' brings the process back",
			 pid, me, o->dir, tmp, tmp);
		break;
	case STEP_PUBLISH:
		if (r->stage) {
			/* the GPU data is in the dump's own copy, not yet in the image: no image to name */
			snprintf(alive, sizeof(alive), "process %d was left suspended by a gpusnap dump (pid %d) that was "
				 "killed after CRIU dumped it, before it wrote the image; its GPU data is in '%s'; gpusnap "
				 "resume %d puts the process back", pid, me, data, pid);
			snprintf(gone, sizeof(gone), "a gpusnap dump (pid %d) was killed after CRIU dumped process %d, before "
				 "it wrote the image at '%s': no image was made", me, pid, o->dir);
			break;
		}
		snprintf(alive, sizeof(alive), "process %d was left suspended by a gpusnap dump (pid %d) that was killed "
			 "after CRIU dumped it; its image is complete at '%s'; gpusnap resume %d puts the process back", pid, me,
			 tmp, pid);
		snprintf(gone, sizeof(gone), "a gpusnap dump (pid %d) was killed after CRIU dumped process %d, before it "
			 "published the image at '%s': the image is complete at '%s'; %s -D '%s' brings the process back", me,
			 pid, o->dir, tmp, dump_restore_cmd(gs_image_tmp_cpu_listed(r->tmp)), tmp);
		break;
	case STEP_FINISH:
		data = r->data_in_tmp ? o->dir : NULL;
		snprintf(alive, sizeof(alive), "process %d was left suspended by a gpusnap dump (pid %d) that was killed "
			 "after it published '%s'; gpusnap resume %d puts it back", pid, me, o->dir, pid);
		snprintf(gone, sizeof(gone), "process %d was dumped to '%s' by a gpusnap dump (pid %d) that was killed as it "
			 "ended; gpusnap restore -D '%s' brings it back", pid, o->dir, me, o->dir);
		break;
	}
	cli_op_step(r->lock, names[step], data, alive, gone[0] ? gone : NULL);
}

/* A test's injected failure at point, as the step after it would fail. */
static int injected(struct dump_run *r, enum gs_fault_point point, struct gs_err *err)
{
	int e = gs_fault_errno(point, EIO);
	return gs_fail_errno(err, gs_exit_from_errno(e), e, "dump of process %d failed at '%s' (injected)", (int)r->pid,
			     gs_fault_name(point));
}

/* Between steps before CRIU: a signal that came stops the dump here (undo follows). */
static int stop_if_signalled(struct dump_run *r, struct gs_err *err)
{
	if (!cli_signal_caught())
		return 0;
	char what[64];
	snprintf(what, sizeof(what), "dump of process %d", (int)r->pid);
	return cli_fail_interrupted(err, what);
}

/* CRIU could not write its images for want of space: the documented code for a full disk. */
static int criu_out_of_space(int rc, const char *dir, struct gs_err *err)
{
	if (rc != GS_E_CRIU || (!strstr(err->msg, strerror(ENOSPC)) && !strstr(err->msg, strerror(EDQUOT))))
		return rc;
	gs_err_wrap(err, "no space left for the image at '%s'", dir);
	err->code = GS_E_NO_SPACE;
	return GS_E_NO_SPACE;
}

/*
 * dump --leave-running, once CRIU has dumped the process (it is still held by
 * the driver and its agent): the process goes on first and the image is
 * published after, so that it stands still only for the GPU data's copy, the
 * driver and CRIU. The agent wrote its data through the page cache
 * (GS_DUMP_CACHED) and reads it back from the temporary image, from memory;
 * the publish (the fsync of that data and of CRIU's files, the checksums of
 * cpu/, the rename) runs alongside the process. A publish that fails leaves
 * the process running and no image, as any failed dump; a resume that fails
 * leaves it suspended with its data in the image, published all the same.
 */
static int finish_leave_running(struct dump_run *r, const struct dump_opts *o, struct gs_err *err)
{
	/* killed here: suspended, the image complete at its temporary name, where resume finds the data */
	record_step(r, o, STEP_PUBLISH);
	if (gs_fault(GS_FI_DUMP_AFTER_CRIU))
		return injected(r, GS_FI_DUMP_AFTER_CRIU, err); /* undo resumes it, from that image */
	double t = gs_now();
	int rc = gs_ckpt_resume(&r->s.cu, &r->proc, 1, NULL, 0, err);
	if (!rc)
		r->driver_suspended = false;
	if (!rc && r->agent_suspended && !(rc = agent_resume_from(r, data_dir(r), err)))
		r->agent_suspended = false;
	r->resume_s = gs_now() - t;
	int drc = 0;
	if (!rc) {
		r->paused_s = gs_now() - r->stopped_at;
		/* the stage's memory is gpusnap's alone from here: nothing is left of it should gpusnap die */
		if (r->stage && (drc = gs_image_stage_detach(r->stage, err)))
			gs_err_wrap(err, "process %d runs on, but its image was not written at '%s'", (int)r->pid, o->dir);
		/*
		 * It runs: the publish touches only the image (whose directory stays
		 * locked by r->tmp), so the process is let go for other commands now
		 * (a suspend to preempt it right after its checkpoint need not wait
		 * for the fsync of many GiB).
		 */
		cli_op_end(r->lock, true);
		r->lock = NULL;
	}
	if (drc) /* it runs on; no image */
		return drc;
	t = gs_now();
	struct gs_err pe = { 0 };
	int prc = 0;
	if (r->stage && !r->agent_suspended) {
		/* the image from the dump's copy, on the storage, while the process runs */
		prc = gs_image_stage_write(r->stage, r->tmp, NULL, &r->stage_bytes, &pe);
		r->stage_write_s = gs_now() - t;
	} else if (r->stage) {
		/*
		 * It did not resume: its data is in the stage alone, which stays
		 * (kept, named below) and does not go into the image: an image
		 * without the GPU data would be no image.
		 */
		prc = gs_fail(&pe, GS_E_AGENT, "the GPU data stayed in '%s'", gs_image_stage_path(r->stage));
	}
	if (!prc)
		prc = gs_image_publish(r->tmp, &r->published, &pe);
	r->publish_s = gs_now() - t;
	gs_fault(GS_FI_DUMP_AFTER_PUBLISH); /* kill or a signal as the dump ends */
	if (!rc) {
		if (prc) { /* the temporary image goes */
			*err = pe;
			gs_err_wrap(err, "process %d runs on, but its image was not published at '%s'", (int)r->pid, o->dir);
		}
		return prc;
	}
	/* it did not resume: the image holds its GPU data (agent path), so it must stay, published or kept */
	char alive[GS_ERR_MSG_MAX];
	if (r->published || prc == 0) {
		snprintf(alive, sizeof(alive), "process %d stays suspended after its dump to '%s'; gpusnap resume %d "
			 "puts it back", (int)r->pid, o->dir, (int)r->pid);
		cli_op_leave(r->lock, r->agent.present ? o->dir : NULL, alive, NULL);
		gs_err_wrap(err, "the image at '%s' is complete, but process %d did not resume (gpusnap resume %d)",
			    o->dir, (int)r->pid, (int)r->pid);
	} else if (r->stage) {
		const char *at = gs_image_stage_path(r->stage);
		snprintf(alive, sizeof(alive), "process %d stays suspended after a failed dump; its GPU data is kept in '%s': "
			 "gpusnap resume %d puts it back", (int)r->pid, at, (int)r->pid);
		cli_op_leave(r->lock, at, alive, NULL);
		gs_err_wrap(err, "process %d did not resume after its dump and no image was published; its data is kept "
			    "at '%s' (gpusnap resume %d)", (int)r->pid, at, (int)r->pid);
		r->keep_stage = true;
	} else {
		char kept[4096];
		keep_tmp_image(r, o->dir, false, kept, sizeof(kept));
		gs_err_wrap(err, "process %d did not resume after its dump, and the image was not published (%s); its "
			    "data is kept at '%s' (gpusnap resume %d)", (int)r->pid, pe.msg, kept, (int)r->pid);
	}
	r->driver_suspended = r->agent_suspended = false; /* the image is the holder: no undo */
	return rc;
}

/*
 * --leave-running on the agent path: the stage, in memory only gpusnap owns
 * (not the process's: CRIU would carry it; not the GPU's context: the
 * driver would copy it), sized for the process's GPU memory. Where there is
 * no room the data goes into the image inside the pause (r->no_stage says
 * why, in --json).
 */
static void open_stage(struct dump_run *r)
{
	uint64_t need = dump_stage_need(&r->agent, r->vram);
	r->stage = dump_stage_open(r->pid, &r->agent, need, need, true, r->no_stage, sizeof(r->no_stage));
}

/*
 * The parent's path the agent records: staged, the absolute one, so that a
 * resume from the stage (gpusnap killed in the pause) finds the chain, and
 * the stage's write records o->parent_rec instead; written into DIR, as
 * o->parent_rec says. NULL without a parent.
 */
static const char *agent_parent_rec(const struct dump_run *r, const struct dump_opts *o)
{
	return !o->parent ? NULL : r->stage ? o->parent : o->parent_rec;
}

/* Whether the agent runs (a failed dump walked back), as its HELLO says now. */
static bool agent_runs(struct dump_run *r)
{
	struct cli_agent now;
	struct gs_err e = { 0 };
	return !cli_agent_probe(r->pid, &now, &e) && now.present && now.state == GS_AGENT_RUNNING;
}

/* The agent's dump into dir, by descriptor where it takes one (the stage: always). */
static int agent_dump_into(struct dump_run *r, const char *dir, double timeout, const struct gs_dump_opts *d,
			   struct gs_err *err)
{
	return dump_agent_into(r->pid, &r->agent, dir, r->stage, timeout, d, err);
}

static int run_dump(struct dump_run *r, const struct dump_opts *o, struct gs_err *err)
{
	double t0 = gs_now();
	/* the agent records the process's PID as it sees it (a container's): an image of either is this process's */
	struct gs_image_tmp_opts to = { .source_pid = r->pid, .source_pid_own = gs_proc_own_pid(r->pid),
					.source_comm = r->comm, .replace = o->replace };
	int rc = gs_image_tmp_create(o->dir, &to, &r->tmp, err);
	if (rc)
		return rc;
	/* CRIU writes through gpusnap's descriptor of cpu/: no rename above it can redirect root's writes */
	if ((rc = gs_image_tmp_cpu_fd_path(r->tmp, r->cpu_dir, sizeof(r->cpu_dir), err)))
		return rc;
	if ((rc = stop_if_signalled(r, err)))
		return rc;

	if (o->parent && !(r->agent.present && (r->agent.caps & GS_CAP_DUMP_RUNNING) && (r->agent.caps & GS_CAP_DUMP_PARENT)))
		return gs_fail(err, r->agent.present ? GS_E_AGENT : GS_E_USAGE, "--parent needs the gpusnap agent's streamed "
			       "dump, which process %d %s", (int)r->pid, r->agent.present ? "lacks (an older agent)" :
			       "cannot take (no agent)");
	if (o->store && !(r->agent.present && (r->agent.caps & GS_CAP_DUMP_RUNNING) && (r->agent.caps & GS_CAP_DUMP_STORE)))
		return gs_fail(err, r->agent.present ? GS_E_AGENT : GS_E_USAGE, "--store needs the gpusnap agent's streamed "
			       "dump, which process %d %s", (int)r->pid, r->agent.present ? "lacks (an older agent)" :
			       "cannot take (no agent)");
	if (r->agent.present && (r->agent.caps & GS_CAP_DUMP_RUNNING)) {
		/* data part, streamed: GPU -> pinned ring -> image, then the GPU memory is released; no staging copy */
		if (o->leave_running && o->store) /* its chunks go into the store, not into the image */
			snprintf(r->no_stage, sizeof(r->no_stage), "a dump into a chunk store (--store) writes into the store");
		else if (o->leave_running)
			open_stage(r);
		/* staged, the image records its parent as the stage's write says (agent_parent_rec) */
		if (r->stage && o->parent && gs_image_stage_set_parent_rec(r->stage, o->parent_rec, err))
			return GS_E_FAILURE;
		r->data_in_tmp = true;
		record_step(r, o, STEP_AGENT);
		double t = r->stopped_at = gs_now();
		/* the agent finishes every CUDA call of its own before it replies: after the driver's lock they would block */
		struct gs_dump_opts d = { .running = true, .cached = o->leave_running, .compress_codec = o->compress.codec,
					  .compress_level = o->compress.level, .parent = o->parent,
					  .parent_rec = agent_parent_rec(r, o),
					  .store = o->store, .store_rec = o->store ? o->store_rec : NULL,
					  .store_ref = o->store ? o->store_ref : NULL };
		rc = agent_dump_into(r, data_dir(r), o->timeout, &d, err);
		if (rc == GS_E_NO_SPACE && r->stage && agent_runs(r)) {
			/* the memory filled up after all (others use it too): into the image inside the pause, as without it */
			snprintf(r->no_stage, sizeof(r->no_stage), "%s", err->msg);
			pr_info("the copy in memory filled up (%s): the image is written inside the pause", err->msg);
			gs_image_stage_free(r->stage, false);
			r->stage = NULL;
			*err = (struct gs_err){ 0 };
			d.parent_rec = agent_parent_rec(r, o);
			rc = agent_dump_into(r, data_dir(r), o->timeout, &d, err);
		}
		if (rc) {
			/*
			 * The agent walked back and the process runs on, unless putting its
			 * data back failed: then it stays suspended with the data only in
			 * this image, which undo retries from and keeps if that fails too.
			 */
			struct cli_agent now;
			struct gs_err e = { 0 };
			if (!cli_agent_probe(r->pid, &now, &e) && now.present && now.state != GS_AGENT_RUNNING)
				r->agent_suspended = r->agent_dumped = r->agent_stuck = true;
			return rc;
		}
		r->agent_suspended = r->agent_dumped = r->streamed = true;
		double total = gs_now() - t;
		r->agent_suspend_s = cli_agent_timing(&r->agent, "quiesce") + cli_agent_timing(&r->agent, "release");
		r->agent_write_s = total > r->agent_suspend_s ? total - r->agent_suspend_s : 0;
		r->gpu_bytes = cli_agent_counter(&r->agent, "bytes");
		r->ring_bytes = cli_agent_counter(&r->agent, "ring_bytes");
		r->gpu_zero_bytes = cli_agent_counter(&r->agent, "gpu_zero_bytes");
		r->parent_bytes = cli_agent_counter(&r->agent, "parent_bytes");
		r->store_bytes = cli_agent_counter(&r->agent, "store_bytes");
		r->copied_bytes = cli_agent_counter(&r->agent, "copied_bytes");
		r->store_new_objects = cli_agent_counter(&r->agent, "store_new_objects");
	} else if (r->agent.present) {
		/* data part (agents without the streamed dump): staging, image, free the staging memory */
		record_step(r, o, STEP_AGENT);
		double t = r->stopped_at = gs_now();
		if ((rc = cli_agent_suspend(r->pid, &r->agent, o->timeout, false, err)))
			return rc;
		r->agent_suspended = true;
		r->agent_suspend_s = gs_now() - t;
		r->gpu_bytes = cli_agent_counter(&r->agent, "bytes");
		if ((rc = stop_if_signalled(r, err)))
			return rc;
		t = gs_now();
		/* the agent finishes every CUDA call of its own before it replies: after the driver's lock they would block */
		r->data_in_tmp = true; /* the agent drops its staging copy once the image is written */
		record_step(r, o, STEP_AGENT);
		if ((rc = cli_agent_dump(r->pid, &r->agent, gs_image_tmp_path(r->tmp), 0,
					 &(struct gs_dump_opts){ .drop_staging = true, .compress_codec = o->compress.codec,
								 .compress_level = o->compress.level }, err)))
			return rc;
		r->agent_dumped = true;
		r->agent_write_s = gs_now() - t;
	}
	/* on the driver path: after the checks, before the driver */
	if (gs_fault(GS_FI_DUMP_AFTER_AGENT))
		return injected(r, GS_FI_DUMP_AFTER_AGENT, err);
	if ((rc = stop_if_signalled(r, err)))
		return rc;
	/* control part (agent) or everything (driver): the driver takes the process off the GPU */
	record_step(r, o, STEP_DRIVER);
	if (!r->agent.present)
		r->stopped_at = gs_now();
	r->proc.pid = r->pid;
	if ((rc = gs_ckpt_suspend(&r->s.cu, &r->proc, 1, o->timeout, err)))
		return rc;
	r->driver_suspended = true;
	if (!r->agent.present && (rc = write_driver_manifest(r, err)))
		return rc;
	if (gs_fault(GS_FI_DUMP_AFTER_DRIVER))
		return injected(r, GS_FI_DUMP_AFTER_DRIVER, err);
	if ((rc = stop_if_signalled(r, err)))
		return rc;

	struct gs_criu_dump_opts co = {
		.leave_running = o->leave_running,
		.tcp = tcp_asked(o),
	};
	record_step(r, o, STEP_CRIU);
	double t = gs_now();
	rc = gs_criu_dump(&r->criu, r->pid, r->cpu_dir, &co, err);
	r->criu_s = gs_now() - t;
	if (rc) /* criu resumes the process it could not dump: undo puts it back on the GPU */
		return criu_out_of_space(rc, o->dir, err);
	if (o->leave_running) {
		rc = finish_leave_running(r, o, err);
		r->total_s = gs_now() - t0;
		return rc;
	}
	/*
	 * The point of no return: CRIU has killed the process, and its image is
	 * its only copy. A signal from here on is obeyed once the dump is
	 * complete. Nothing to undo from here on.
	 */
	r->driver_suspended = r->agent_suspended = false;
	t = gs_now();
	/* CRIU's files get their checksums first: an image kept from here on verifies as a published one */
	rc = gs_image_tmp_list_cpu(r->tmp, err);
	record_step(r, o, STEP_PUBLISH);
	if (!rc)
		rc = gs_fault(GS_FI_DUMP_AFTER_CRIU) ? injected(r, GS_FI_DUMP_AFTER_CRIU, err)
						     : gs_image_publish(r->tmp, &r->published, err);
	r->publish_s = gs_now() - t;
	if (rc && !r->published) {
		/* the process is gone and its image complete at the temporary name: keep it under its own name, say where */
		char kept[4096];
		keep_tmp_image(r, o->dir, true, kept, sizeof(kept));
		gs_err_wrap(err, "process %d was dumped, but its image was not published; it is kept at '%s' (%s -D '%s' "
			    "brings the process back)", (int)r->pid, kept, dump_restore_cmd(r->kept_listed), kept);
		return rc;
	}
	if (rc)
		return rc;
	record_step(r, o, STEP_FINISH);
	gs_fault(GS_FI_DUMP_AFTER_PUBLISH); /* kill or a signal as the dump ends: nothing is left to do */
	r->total_s = gs_now() - t0;
	return rc;
}

static void print_outcome(const struct dump_run *r, const struct dump_opts *o, int rc, const struct gs_err *err)
{
	double gpu_s = r->agent.present ? r->agent_suspend_s + r->agent_write_s + r->proc.lock_s + r->proc.checkpoint_s
					: r->proc.lock_s + r->proc.checkpoint_s;
	if (o->json) {
		struct gs_json j;
		cli_json_begin_outcome(&j, "dump", rc, err);
		gs_json_kv_int(&j, "pid", r->pid);
		gs_json_kv_string(&j, "comm", r->comm);
		gs_json_kv_string(&j, "dir", o->dir);
		gs_json_kv_string(&j, "path", r->agent.present ? "agent" : "driver");
		gs_json_kv_bool(&j, "leave_running", o->leave_running);
		gs_json_kv_bool(&j, "published", r->published);
		gs_json_kv_uint(&j, "gpu_data_bytes", r->gpu_bytes);
		gs_json_kv_bool(&j, "streamed", r->streamed);
		gs_json_kv_uint(&j, "ring_bytes", r->ring_bytes);
		gs_json_kv_uint(&j, "gpu_zero_bytes", r->gpu_zero_bytes);
		if (r->streamed)
			gs_json_kv_uint(&j, "gpu_copied_bytes", r->copied_bytes);
		if (o->parent)
			gs_json_kv_uint(&j, "parent_bytes", r->parent_bytes);
		if (o->keep) {
			gs_json_kv_uint(&j, "keep_removed", r->keep_removed);
			gs_json_kv_uint(&j, "keep_gc_objects", r->keep_gc_objects);
			gs_json_kv_uint(&j, "keep_gc_bytes", r->keep_gc_bytes);
		}
		if (o->store) {
			gs_json_kv_string(&j, "store", o->store);
			gs_json_kv_uint(&j, "store_bytes", r->store_bytes);
			gs_json_kv_uint(&j, "store_new_objects", r->store_new_objects);
		}
		gs_json_kv_uint(&j, "cpu_bytes", rc ? 0 : dump_dir_bytes(o->dir, "cpu"));
		if (o->leave_running && r->agent.present) {
			/* what the pause copied, and where to: memory (written to DIR after it) or DIR itself */
			gs_json_kv_bool(&j, "staged", r->stage != NULL);
			gs_json_kv_uint(&j, "stop_copy_bytes", r->gpu_bytes > r->gpu_zero_bytes ? r->gpu_bytes - r->gpu_zero_bytes : 0);
			if (r->stage)
				gs_json_kv_uint(&j, "stage_written_bytes", r->stage_bytes);
			else
				gs_json_kv_string(&j, "no_stage", r->no_stage);
		}
		gs_json_key(&j, "times");
		gs_json_object_begin(&j);
		gs_json_kv_double(&j, "total_s", r->total_s);
		gs_json_kv_double(&j, "gpu_s", gpu_s);
		gs_json_kv_double(&j, "agent_suspend_s", r->agent_suspend_s);
		gs_json_kv_double(&j, "agent_write_s", r->agent_write_s);
		gs_json_kv_double(&j, "lock_s", r->proc.lock_s);
		gs_json_kv_double(&j, "checkpoint_s", r->proc.checkpoint_s);
		gs_json_kv_double(&j, "criu_s", r->criu_s);
		gs_json_kv_double(&j, "publish_s", r->publish_s);
		gs_json_kv_double(&j, "resume_s", r->resume_s);
		if (r->stage)
			gs_json_kv_double(&j, "stage_write_s", r->stage_write_s);
		if (o->leave_running)
			gs_json_kv_double(&j, "paused_s", r->paused_s);
		gs_json_object_end(&j);
		gs_json_object_end(&j);
		cli_json_print(&j);
		return;
	}
	if (rc)
		return;
	char b[32], comm[sizeof(r->comm)];
	printf("dumped %d (%s) to %s: %s path, GPU part %.2f s", (int)r->pid, gs_printable(comm, sizeof(comm), r->comm), o->dir,
	       r->agent.present ? "agent" : "driver", gpu_s);
	if (r->streamed) {
		char rb[32];
		printf(" (%s written in %.2f s through %s of pinned memory)", gs_format_bytes(r->gpu_bytes, b, sizeof(b)),
		       r->agent_write_s, gs_format_bytes(r->ring_bytes, rb, sizeof(rb)));
	} else if (r->agent.present) {
		printf(" (%s written in %.2f s)", gs_format_bytes(r->gpu_bytes, b, sizeof(b)), r->agent_write_s);
	}
	printf(", CRIU part %.2f s, total %.2f s\n", r->criu_s, r->total_s);
	if (o->leave_running && r->stage)
		printf("process %d keeps running (it stood still for %.2f s; the image was written in %.2f s after)\n",
		       (int)r->pid, r->paused_s, r->stage_write_s);
	else if (o->leave_running)
		printf("process %d keeps running (it stood still for %.2f s)\n", (int)r->pid, r->paused_s);
	else
		printf("process %d is gone; gpusnap restore -D %s brings it back\n", (int)r->pid, o->dir);
}

/*
 * --parent: an image that opens with its whole chain checked (image.h), of
 * process pid_arg as the agent dumps it, and not DIR itself (which the dump
 * replaces). Sets o->parent to its absolute path (in abs) and o->parent_rec
 * to what the image records: its name alone when it lies beside DIR (a
 * series moves as one directory), else the absolute path. The exit code.
 */
static int parent_check(struct dump_opts *o, char *abs, const char *pid_arg)
{
	struct gs_err err = { 0 };
	int pid = 0;
	if (o->tree || o->driver_only)
		return cli_usage_error("dump", "--parent takes neither --tree nor --driver (only the agent's streamed dump "
				       "writes incremental images)");
	if (!realpath(o->parent, abs)) {
		gs_fail_errno(&err, GS_E_IMAGE, errno, "the parent image '%s' is missing", o->parent);
		return cli_report_error(&err);
	}
	char dir_parent[PATH_MAX], abs_parent[PATH_MAX];
	snprintf(dir_parent, sizeof(dir_parent), "%s", o->dir);
	snprintf(abs_parent, sizeof(abs_parent), "%s", abs);
	char *ds = strrchr(dir_parent, '/'), *ps = strrchr(abs_parent, '/');
	char real_dir[PATH_MAX];
	if (realpath(o->dir, real_dir) && !strcmp(real_dir, abs))
		return cli_usage_error("dump", "--parent '%s' is DIR itself, which the dump replaces", o->parent);
	struct gs_image *img;
	if (gs_image_open(abs, &img, &err)) {
		gs_err_wrap(&err, "the parent image");
		return cli_report_error(&err);
	}
	const struct gs_image_info *in = gs_image_get_info(img);
	int rc = 0;
	if (gs_parse_pid(pid_arg, &pid) == 0 && (in->source_pid != pid || strcmp(in->how, "agent")))
		rc = gs_fail(&err, GS_E_IMAGE, "the parent image '%s' is %s of process %d, not an agent image of process %d",
			     abs, strcmp(in->how, "agent") ? "not an agent image" : "an image", (int)in->source_pid, pid);
	gs_image_close(img);
	if (rc)
		return cli_report_error(&err);
	if (ds && ps) {
		*ds = *ps = '\0';
		char real_dp[PATH_MAX];
		bool beside = realpath(*dir_parent ? dir_parent : "/", real_dp) && !strcmp(real_dp, *abs_parent ? abs_parent : "/");
		snprintf(o->parent_rec, sizeof(o->parent_rec), "%s", beside ? ps + 1 : abs);
	} else {
		snprintf(o->parent_rec, sizeof(o->parent_rec), "%s", abs);
	}
	o->parent = abs;
	return 0;
}

/*
 * --store: not with --parent or --driver (only the agent's streamed dump
 * writes into a store, and it finds what the parent has by itself); STORE made absolute, opened
 * (created if missing or empty, image/store.h) and the dump registered in
 * it (its ref, naming DIR) before anything is written. o->store_rec is what
 * the image records: the store's name alone when it lies beside DIR (a
 * series with its store moves as one directory), else its absolute path.
 * The exit code.
 */
static int store_check(struct dump_opts *o, char *abs)
{
	if (o->parent || o->driver_only)
		return cli_usage_error("dump", "--store takes neither --parent nor --driver (only the agent's streamed dump "
				       "writes into a chunk store, which finds what a parent holds by itself)");
	struct gs_err err = { 0 };
	if (o->store[0] != '/') {
		char cwd[PATH_MAX / 2];
		if (!getcwd(cwd, sizeof(cwd)) || (size_t)snprintf(abs, PATH_MAX, "%s/%s", cwd, o->store) >= PATH_MAX)
			return cli_usage_error("dump", "cannot make '%s' an absolute path", o->store);
	} else {
		snprintf(abs, PATH_MAX, "%s", o->store);
	}
	size_t n = strlen(abs);
	while (n > 1 && abs[n - 1] == '/')
		abs[--n] = '\0';
	if (gs_store_open(abs, true, &o->st, &err))
		return cli_report_error(&err);
	char real[PATH_MAX];
	if (realpath(abs, real))
		snprintf(abs, PATH_MAX, "%s", real);
	char dir_parent[PATH_MAX], store_parent[PATH_MAX], real_dp[PATH_MAX];
	snprintf(dir_parent, sizeof(dir_parent), "%s", o->dir);
	snprintf(store_parent, sizeof(store_parent), "%s", abs);
	char *ds = strrchr(dir_parent, '/'), *ss = strrchr(store_parent, '/');
	bool beside = false;
	if (ds && ss) {
		*ds = *ss = '\0';
		beside = realpath(*dir_parent ? dir_parent : "/", real_dp) && !strcmp(real_dp, *store_parent ? store_parent : "/");
	}
	snprintf(o->store_rec, sizeof(o->store_rec), "%s", beside ? ss + 1 : abs);
	if (gs_store_ref_create(o->st, o->dir, o->store_ref, sizeof(o->store_ref), &err)) {
		gs_store_close(o->st);
		o->st = NULL;
		return cli_report_error(&err);
	}
	o->store = abs;
	return 0;
}

/*
 * dump --tree (dump_tree.h), with the store --store opened: each process's
 * image (DIR/procs/<pid>) records it from two levels further down.
 */
static int run_tree(struct dump_opts *o, struct dump_tree_opts *to, const char *pid_arg)
{
	char part_rec[PATH_MAX + 8];
	if (o->st) {
		snprintf(part_rec, sizeof(part_rec), "%s%s", o->store_rec[0] == '/' ? "" : "../../", o->store_rec);
		to->store = o->st;
		to->store_path = o->store;
		to->store_rec = o->store_rec;
		to->store_part_rec = part_rec;
		to->store_ref = o->store_ref;
		to->keep = o->keep;
	}
	int rc = dump_tree(to, pid_arg);
	gs_store_close(o->st);
	return rc;
}

int cmd_dump(int argc, char **argv)
{
	struct dump_opts o = { .timeout = DEFAULT_LOCK_TIMEOUT_S };
	const struct gs_option opts[] = {
		GS_OPT_STRING_('D', "dir", &o.dir, "DIR", "image directory to create or replace (required)"),
		GS_OPT_BOOL_(0, "tree", &o.tree,
			     "dump PID's whole process tree with every CUDA process in it (ranks sharing GPU memory too)"),
		GS_OPT_BOOL_(0, "leave-running", &o.leave_running, "the process keeps running after the dump"),
		GS_OPT_SECONDS_(0, "timeout", &o.timeout, "SECONDS",
				"wait at most this long for running GPU work (default 30, 0 = no limit)"),
		GS_OPT_BOOL_(0, "driver", &o.driver_only, "use the driver path even where the gpusnap agent runs"),
		GS_OPT_BOOL_(0, "multi-gpu-driver", &o.multi_gpu_driver, "driver path: go ahead with a process holding memory on several GPUs (the driver cannot restore some such processes)"),
		GS_OPT_BOOL_(0, "tcp-close", &o.tcp_close, "dump established TCP connections; they come back closed"),
		GS_OPT_BOOL_(0, "tcp-established", &o.tcp_established,
			     "dump established TCP connections and restore them (CRIU locks them with iptables, or nftables)"),
		GS_OPT_BOOL_(0, "replace", &o.replace, "replace DIR even if it holds the image of another process"),
		GS_OPT_STRING_(0, "compress", &o.compress_arg, "CODEC[:LEVEL]",
			       "compress the GPU data the agent writes, chunk by chunk: lz4 (levels 1-12, default 1) or "
			       "zstd (levels 1-22, default 3)"),
		GS_OPT_STRING_(0, "parent", &o.parent, "PARENT_DIR",
			       "an incremental image: only chunks that differ from PARENT_DIR's (an image of this process) "
			       "are written, the rest is read from there"),
		GS_OPT_INT_(0, "keep", &o.keep, "K",
			    "with --store: after DIR is published, keep the newest K images of this process in STORE "
			    "beside DIR (DIR one of them), remove the older ones and gc STORE"),
		GS_OPT_STRING_(0, "store", &o.store, "STORE",
			       "keep the GPU data's chunks in the chunk store STORE (created if missing), shared with the "
			       "other images written into it: a chunk the store holds is neither copied nor written again "
			       "(gpusnap gc removes what no image uses)"),
		GS_OPT_BOOL_(0, "json", &o.json, "print the outcome as JSON"),
		GS_OPT_END_(),
	};
	int nargs;
	int rc = cli_parse(argc, argv, opts, dump_usage, 0, &nargs);
	if (rc)
		return rc == GS_PARSE_HELP ? 0 : rc;
	if ((rc = cli_want_args("dump", argv, nargs, 1, "PID")))
		return rc;
	if (!o.dir || !*o.dir)
		return cli_usage_error("dump", "-D DIR is required");
	if (o.tcp_close && o.tcp_established)
		return cli_usage_error("dump", "--tcp-close and --tcp-established exclude each other");
	if (o.compress_arg) {
		struct gs_err ce = { 0 };
		if (gs_compress_parse(o.compress_arg, &o.compress, &ce))
			return cli_usage_error("dump", "--compress: %s", ce.msg);
	}

	/* the agent writes into the image from its own working directory: give it an absolute path */
	char absdir[4096];
	if (o.dir[0] != '/') {
		char cwd[3000];
		if (!getcwd(cwd, sizeof(cwd)) || (size_t)snprintf(absdir, sizeof(absdir), "%s/%s", cwd, o.dir) >= sizeof(absdir)) {
			fprintf(stderr, "gpusnap: cannot make '%s' an absolute path\n", o.dir);
			return GS_E_USAGE;
		}
		o.dir = absdir;
	}
	struct dump_tree_opts to = {
		.dir = o.dir, .timeout = o.timeout, .leave_running = o.leave_running, .driver_only = o.driver_only,
		.json = o.json, .replace = o.replace, .multi_gpu_driver = o.multi_gpu_driver,
		.tcp = tcp_asked(&o), .compress_codec = o.compress.codec, .compress_level = o.compress.level,
	};
	char parent_abs[PATH_MAX], store_abs[PATH_MAX];
	if (o.parent) {
		int prc = parent_check(&o, parent_abs, argv[0]);
		if (prc)
			return prc;
	}
	if (!o.store && gs_setting_str(GS_S_STORE) && *gs_setting_str(GS_S_STORE) && !o.parent && !o.driver_only)
		o.store = gs_setting_str(GS_S_STORE);
	if (o.keep && (!o.store || o.keep < 1))
		return cli_usage_error("dump", "--keep K takes a K of at least 1, and --store (the images of a series "
				       "that shares a store stand alone)");
	if (o.store) {
		int src = store_check(&o, store_abs);
		if (src)
			return src;
	}
	cli_sweep_leftovers(); /* before a stage is made: the memory of stages nobody needs */
	if (o.tree)
		return run_tree(&o, &to, argv[0]);
	struct gs_err err = { 0 };
	struct dump_run *r = calloc(1, sizeof(*r));
	if (!r)
		return cli_report_error(&(struct gs_err){ GS_E_FAILURE, "out of memory" });
	r->store = o.st;
	int pid;
	/* checks before anything is touched: the process, the driver, the process's state, CRIU, the agent */
	rc = gs_parse_pid(argv[0], &pid) ? gs_fail(&err, GS_E_USAGE, "'%s' is not a process ID", argv[0])
					 : gs_proc_check(pid, &err);
	/* signals are recorded from here: the lock's record and every step are undone or finished, never cut */
	cli_signals_catch();
	/* one operation per process: the checks below hold only while no other gpusnap acts on it */
	if (!rc)
		rc = cli_op_begin(pid, false, "dump", &r->lock, &r->left, &err);
	if (rc == GS_E_NO_PROCESS)
		cli_op_explain_gone(pid, &err);
	if (!rc)
		rc = cli_session_open(&r->s, &err);
	if (!rc)
		rc = gs_cuda_require_checkpoint(&r->s.cu, &err);
	pid_t other = 0;
	if (!rc && (other = cli_tree_other_cuda(&r->s, pid))) {
		/*
		 * CRIU dumps PID with every process under it, and another of them
		 * uses CUDA too (a framework's worker processes, ranks PID
		 * started): only the tree dump handles its GPU state; CRIU alone
		 * would fail on its device mappings after the GPU part was done.
		 */
		fprintf(stderr, "gpusnap: process %d under %d uses CUDA too: dumping the whole tree, as --tree does\n",
			(int)other, pid);
		cli_op_end(r->lock, false);
		cli_session_close(&r->s);
		free(r);
		return run_tree(&o, &to, argv[0]);
	}
	r->pid = pid;
	gs_proc_comm(r->pid, r->comm, sizeof(r->comm));
	if (!rc) {
		CUprocessState st;
		rc = gs_ckpt_get_state(&r->s.cu, r->pid, &st, &err);
		if (!rc && st != CU_PROCESS_STATE_RUNNING)
			rc = gs_fail(&err, GS_E_STATE, "process %d is %s; resume it before dumping it", (int)r->pid,
				     gs_cuda_state_name(st));
	}
	/* after "not a CUDA process" (exit 4): a missing CRIU is no answer for a PID that is not one */
	if (!rc)
		rc = cli_criu_find(&r->criu, &err);
	if (!rc && !o.driver_only)
		rc = cli_agent_probe(r->pid, &r->agent, &err);
	if (!rc && r->agent.present && r->agent.state != GS_AGENT_RUNNING)
		rc = gs_fail(&err, GS_E_STATE, "process %d is suspended; resume it before dumping it", (int)r->pid);
	/* what the process holds on each GPU, once: the check below and the image's metadata (r is zeroed) */
	if (!rc)
		cli_process_vram_per_gpu(&r->s, r->pid, r->vram, &r->gpu_mask);
	if (!rc && !r->agent.present)
		rc = cli_driver_multi_gpu_check(&r->s, r->pid, &r->gpu_mask, o.multi_gpu_driver, &err);
	/* a process a killed gpusnap left suspended: say by whom and what to do */
	if (rc == GS_E_STATE && r->left.if_alive[0])
		cli_err_append(&err, "%s", r->left.if_alive);
	/* after the CUDA checks: "not a CUDA process" is the more useful answer when both apply */
	if (!rc)
		rc = gs_criu_dumpable(&r->criu, r->pid, tcp_asked(&o), NULL, &err);
	if (!rc)
		rc = cli_tree_check_device_files(r->pid, &r->pid, 1, &err);
	struct stat pst;
	char ppath[64];
	snprintf(ppath, sizeof(ppath), "/proc/%d", (int)r->pid);
	/* the agent writes the image as the process's user, and restore trusts only this user's (or root's) files */
	if (!rc && r->agent.present && stat(ppath, &pst) == 0 && pst.st_uid != geteuid() && pst.st_uid != 0)
		rc = gs_fail(&err, GS_E_PERMISSION,
			     "process %d runs as user %u and its agent would write the image: run gpusnap dump as that user, or "
			     "use --driver", (int)r->pid, (unsigned)pst.st_uid);
	if (rc) {
		cli_op_end(r->lock, false);
		cli_session_close(&r->s);
		free(r);
		if (o.st)
			gs_store_ref_remove(o.st);
		gs_store_close(o.st);
		return cli_report_error(&err);
	}

	char what[64];
	snprintf(what, sizeof(what), "dump %d", (int)r->pid);
	struct cli_progress *progress = cli_progress_start(what);
	rc = run_dump(r, &o, &err);
	cli_progress_stop(progress);
	if (rc)
		undo(r);
	char runs_on[64];
	snprintf(what, sizeof(what), "dump of process %d", (int)r->pid);
	snprintf(runs_on, sizeof(runs_on), "process %d runs on", (int)r->pid);
	rc = cli_dump_failed_by_signal(rc, r->published, r->undo_failed, what, runs_on, o.dir, &err);
	if (r->stage && r->keep_tmp) {
		/* the undo could not resume it: the stage holds its data, the temporary image none of it */
		r->keep_stage = true;
		char how[GS_ERR_MSG_MAX];
		snprintf(how, sizeof(how), "process %d stays suspended after a failed dump; its GPU data is kept in '%s': "
			 "gpusnap resume %d puts it back", (int)r->pid, gs_image_stage_path(r->stage), (int)r->pid);
		cli_op_leave(r->lock, gs_image_stage_path(r->stage), how, NULL);
		fprintf(stderr, "gpusnap: process %d stays suspended; its GPU data is kept in '%s' (gpusnap resume --image "
			"'%s' %d puts it back)\n", (int)r->pid, gs_image_stage_path(r->stage), gs_image_stage_path(r->stage),
			(int)r->pid);
		gs_image_tmp_discard(r->tmp);
	} else if (r->tmp && r->keep_tmp) {
		char kept[4096];
		keep_tmp_image(r, o.dir, false, kept, sizeof(kept));
		fprintf(stderr, "gpusnap: process %d stays suspended; its GPU data is kept in '%s' (gpusnap resume --image "
			"'%s' %d puts it back)\n", (int)r->pid, kept, kept, (int)r->pid);
	} else if (r->tmp) {
		if (r->published)
			gs_image_tmp_close(r->tmp);
		else
			gs_image_tmp_discard(r->tmp);
	}
	/* the ref names what the store's objects are kept for: the image, a kept one; nothing published, none */
	if (o.st && !r->published && !r->kept)
		gs_store_ref_remove(o.st);
	if (!rc && r->published && o.keep) {
		struct dump_keep k = { .dir = o.dir, .store_path = o.store, .st = o.st, .keep = o.keep };
		dump_keep_newest(&k);
		r->keep_removed = k.removed;
		r->keep_gc_objects = k.gc_objects;
		r->keep_gc_bytes = k.gc_bytes;
	}
	print_outcome(r, &o, rc, &err);
	gs_image_stage_free(r->stage, r->keep_stage);
	if (rc)
		cli_report_error(&err);
	else if (cli_signal_caught())
		fprintf(stderr, "gpusnap: %s came after CRIU had dumped process %d, too late to undo; the dump was finished\n",
			cli_signal_name(cli_signal_caught()), (int)r->pid);
	cli_op_end(r->lock, rc == 0);
	cli_session_close(&r->s);
	free(r);
	gs_store_close(o.st);
	return rc;
}
