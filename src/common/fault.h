/*
 * fault.h - fault injection from one table, for the tests of every failure
 * path (the shape of CRIU's criu/include/fault-injection.h).
 *
 * Code that can fail at a step a test must reach asks gs_fault(GS_FI_x) at
 * that step; the answer is false unless GPUSNAP_FAULT names the point. The
 * variable is read once per process (the gpusnap command, or the agent in
 * the app, which inherits it from `gpusnap run`):
 *
 *   GPUSNAP_FAULT=point[@N[+]][=ACTION[:ARG]][,point...]
 *
 *   @N     fire at the N-th time the point is reached (default 1);
 *   @N+    fire at the N-th time and every time after it;
 *   ACTION fail (default): gs_fault returns true and the caller fails as it
 *            would on the real error, with gs_fault_errno's errno (ARG: a
 *            number or a name: ENOSPC, EIO, ENOMEM, EINTR; default EIO);
 *          kill: the process sends itself SIGKILL there (a crash);
 *          term: SIGTERM to itself, handled as any SIGTERM would be;
 *          exit: _exit(ARG, default 1) (an app that exits mid-operation);
 *          hold: sleeps ARG seconds (default 5) there, then returns false
 *            (a window for a test to act in).
 *
 * Every point is in GS_FAULT_POINTS below with its name and where it fires;
 * docs/reliability.md lists them. An unknown name in GPUSNAP_FAULT is
 * reported once (log) and ignored. gs_fault is thread-safe and costs one
 * load when no fault is set; it is not for signal handlers.
 */
#ifndef GPUSNAP_COMMON_FAULT_H
#define GPUSNAP_COMMON_FAULT_H

#include <stdbool.h>

/*
 * X(ID, "name", "where it fires"). Grouped by the part that asks; keep the
 * groups apart so additions to one do not touch another's lines.
 */
#define GS_FAULT_POINTS(X)                                                                            \
	/* --- the agent (src/agent) --- */                                                           \
	X(AGENT_QUIESCE, "agent-quiesce", "waiting for the app's GPU work after the gate closed")     \
	X(AGENT_COPY_OUT, "agent-copy-out", "a chunk's copy from the GPU (suspend, dump)")           \
	X(AGENT_RELEASE, "agent-release", "unmapping a region's physical memory")                    \
	X(AGENT_RECREATE, "agent-recreate", "creating a region's physical memory again (ENOMEM)")    \
	X(AGENT_COPY_IN, "agent-copy-in", "a chunk's copy to the GPU (resume, restore)")             \
	X(AGENT_REPLY, "agent-reply", "before the agent replies to a suspend or dump")               \
	X(AGENT_STACK, "agent-stack", "giving a context its stack back on resume (out of GPU memory)") \
	X(AGENT_RING_BUILD, "agent-ring-build", "the kept copy ring's background build, before it pins (hold: a slow start)") \
	X(AGENT_STAGING_PIN, "agent-staging-pin", "a pinned staging pool's worker, before it pins or unpins (hold: a slow pin)") \
	/* --- the agent's allocation hooks and control server (agent_hooks.c, agent_main.c) --- */  \
	X(AGENT_ALLOC, "agent-alloc", "an allocation hook inside the gate, before its device's set-up") \
	X(AGENT_OPERATION, "agent-operation", "an operation (suspend, resume, dump) is under way, before its work") \
	/* --- the agent's peer access (agent_peer.c) --- */                                          \
	X(AGENT_PEER_ACCESS, "agent-peer-access", "giving a backing a peer's access after cuCtxEnablePeerAccess") \
	/* --- memory shared between processes (agent_share.c, src/cli/share_tree.c) --- */          \
	X(SHARE_LET_GO, "share-let-go", "an importer lets go of imported GPU memory (suspend, dump)") \
	X(SHARE_HANDOVER, "share-handover", "--tree resume: exports made again, before importers get them") \
	/* --- the image (src/image) --- */                                                           \
	X(IMAGE_WRITE, "image-write", "a write of the image writer (ENOSPC, EIO)")                   \
	X(IMAGE_READ, "image-read", "a read of an image's file: manifest, chunk, CRIU's (EIO)")      \
	X(IMAGE_PUBLISH, "image-publish", "publishing: 1st hit before the rename to DIR, 2nd after") \
	X(IMAGE_SYNC, "image-sync", "gs_image_sync: an image published unsynced made durable afterwards (EIO)") \
	/* --- CRIU (src/criu) --- */                                                                 \
	X(CRIU_RUN, "criu-run", "running criu (it fails as if criu had)")                            \
	X(CRIU_UFFD, "criu-uffd", "asking whether userfaultfd can serve a lazy restore (it says no)") \
	/* --- the CRIU plugin (src/criu_plugin) --- */                                               \
	X(PLUGIN_PAUSE, "plugin-pause", "the first PAUSE_DEVICES, before the processes leave the GPU (hold: slow GPU work)") \
	X(PLUGIN_CHECKPOINT, "plugin-checkpoint", "CHECKPOINT_DEVICES, every task frozen: CRIU's dump fails") \
	X(PLUGIN_RESTORE, "plugin-restore", "RESUME_DEVICES_LATE, before the driver's restore of the task") \
	X(PLUGIN_VERIFY, "plugin-verify", "the restore's checksum pass, in its own process, before it reads (hold: a slow pass)") \
	/* --- the dump command (src/cli/cmd_dump.c) --- */                                           \
	X(DUMP_AFTER_AGENT, "dump-after-agent", "the agent has its data in the image, before the driver") \
	X(DUMP_AFTER_DRIVER, "dump-after-driver", "the driver checkpointed the process, before CRIU") \
	X(DUMP_AFTER_CRIU, "dump-after-criu", "CRIU dumped the process, before the image is published") \
	X(DUMP_AFTER_PUBLISH, "dump-after-publish", "the image is published, before the dump ends")  \
	X(DUMP_STAGE_WRITE, "dump-stage-write", "dump --leave-running: the process runs again, before each write of the image from the dump's copy (ENOSPC, EIO; hold: a slow disk)") \
	/* --- the restore command (src/cli/cmd_restore.c) --- */                                     \
	X(RESTORE_AFTER_CRIU, "restore-after-criu", "CRIU restored the process (held), before the GPU part") \
	X(RESTORE_BEFORE_CONT, "restore-before-cont", "the process is restored and held, before it continues") \
	X(RESTORE_AFTER_CONT, "restore-after-cont", "the restored process continued, before the agent loads its GPU data") \
	X(RESTORE_LAZY_DAEMON, "restore-lazy-daemon", "restore --lazy-pages: CRIU restored the process, its pages still coming; the lazy-pages daemon is killed there (SIGKILL)") \
	/* --- dump --tree and the restore of its image (src/cli/dump_tree.c, cmd_restore.c) --- */   \
	X(DUMP_TREE_AFTER_AGENTS, "dump-tree-after-agents", "dump --tree: every agent's data in the image, shared memory let go, before the driver") \
	X(DUMP_TREE_AFTER_DRIVER, "dump-tree-after-driver", "dump --tree: the driver checkpointed the tree's processes, before CRIU") \
	X(RESTORE_TREE_BEFORE_AGENTS, "restore-tree-before-agents", "restore of a tree: the processes continued, before their agents load") \
	/* --- the switch command (src/cli/cmd_switch.c) --- */                                         \
	X(SWITCH_AFTER_OUT, "switch-after-out", "switch one by one: OUT suspended, before IN's resume") \
	X(SWITCH_AFTER_BOTH, "switch-after-both", "switch: OUT suspended and IN resumed, before the switch ends") \
	/* --- suspend and resume commands (src/cli) --- */                                           \
	X(SUSPEND_AFTER_AGENT, "suspend-after-agent", "the agent released its data, before the driver") \
	X(SUSPEND_AFTER_GATES, "suspend-after-gates", "--tree: every agent's gate closed, before any suspend") \
	X(SUSPEND_AFTER_DRIVER, "suspend-after-driver", "the driver checkpointed the processes, before suspend ends") \
	X(RESUME_AFTER_DRIVER, "resume-after-driver", "the driver restored the process, before the agent")

enum gs_fault_point {
#define GS_FAULT_ENUM_(id, name, where) GS_FI_##id,
	GS_FAULT_POINTS(GS_FAULT_ENUM_)
#undef GS_FAULT_ENUM_
	GS_FI_COUNT_
};

/* Whether the point fires now (counts the hit; runs kill/term/exit/hold actions itself). */
bool gs_fault(enum gs_fault_point p);
/* The errno a firing `fail` action asked for (ARG), else dflt. */
int gs_fault_errno(enum gs_fault_point p, int dflt);
/* The point's name ("agent-release"), for logs and docs; NULL for an unknown point. */
const char *gs_fault_name(enum gs_fault_point p);
/* What the table says about the point, for docs and --help of tests. */
const char *gs_fault_where(enum gs_fault_point p);
/*
 * Parses spec (GPUSNAP_FAULT's syntax) instead of the environment and resets
 * every counter: for unit tests. Returns the number of entries it could not
 * parse (0 when all were good).
 */
int gs_fault_configure(const char *spec);

#endif
