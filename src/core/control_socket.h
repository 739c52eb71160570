/*
 * control_socket.h - the Unix socket between gpusnap and its preloaded agent.
 *
 * Where the socket lives: a file agent-<pid>.sock (pid as the agent sees
 * itself) in a directory only its user can enter:
 *   $GPUSNAP_RUN_DIR if set, else /run/gpusnap for root, else /tmp/gpusnap-<uid>
 *   (root falls back to /tmp/gpusnap-0 where /run is not writable).
 * The directory is created with mode 0700 and used only if it is a real
 * directory owned by the user with no group/other access, so nobody else can
 * plant or reach a socket there. Abstract socket names ("\0gpusnap-<pid>")
 * were considered: they need no files and leave nothing stale, but belong to
 * a network namespace (a container with its own network, the common case, is
 * unreachable from the host without setns) and have no permissions besides
 * the peer check; a file in a mount namespace is reachable from outside as
 * /proc/<pid>/root/<path>, which gs_ctl_find_agent uses.
 *
 * Access: the server checks every client's SO_PEERCRED: the agent's own uid
 * or root, else it replies RESULT GS_E_PERMISSION and closes. The client
 * checks the server's SO_PEERCRED pid against the pid it meant, so a stale or
 * foreign socket never gets a suspend meant for another process.
 *
 * Exchange: one connection carries one request and one reply (protocol.h).
 * The server serves each connection on a thread of its own, at most
 * GS_CTL_MAX_CONNECTIONS at once (one more is answered at once with
 * GS_E_AGENT "serving N connections already"), so a client that connects and
 * says nothing delays nobody else; it is dropped after the I/O timeout. A
 * request whose flags or timeout the protocol does not allow
 * (gs_msg_check_request) is answered GS_E_USAGE without reaching the
 * handler. All the server's threads have every signal blocked (the app's
 * handlers never run there); the acceptor thread owns the connection
 * threads. gs_ctl_server_stop wakes them all through an eventfd, waits for
 * running handlers to return, joins every thread, closes and removes the
 * socket file.
 *
 * Descriptors lost to the app: an app that closes every descriptor
 * (close_range, closefrom, a loop of close) at its start closes the
 * listening socket and the eventfd too. The server looks at its two
 * long-lived descriptors at every wake-up and at least every
 * GS_CTL_CHECK_MS, by what they are (a listening Unix socket bound to its
 * path; an eventfd), not by inode, which CRIU's restore changes: one that is
 * no longer what it was is forgotten, never read, written or closed (its
 * number may be the app's now), and a lost listening socket is made anew at
 * the same path once nobody listens there. A stop then comes through a flag the server looks at on the same
 * tick. The agent also keeps its descriptors out of the app's close_range
 * and closefrom (agent_fds.c); this is what remains when an app closes them
 * another way.
 *
 * Stale sockets: an agent that ends without stopping its server (a fork
 * child that leaves by _exit, a SIGKILL) leaves its socket file behind;
 * nobody listens on it, so the client finds "no agent listening" (GS_E_AGENT)
 * and the next server started in the directory removes it
 * (gs_ctl_remove_stale_sockets).
 * Not async-signal-safe; no SIGPIPE is ever raised (MSG_NOSIGNAL).
 */
#ifndef GPUSNAP_CORE_CONTROL_SOCKET_H
#define GPUSNAP_CORE_CONTROL_SOCKET_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "common/err.h"
#include "core/protocol.h"

#define GS_CTL_SOCKET_PREFIX "agent-"
#define GS_CTL_SOCKET_SUFFIX ".sock"
/* Connections served at once; a gpusnap command holds one, `--tree` one per process of the tree (each its own agent). */
#define GS_CTL_MAX_CONNECTIONS 32

/*
 * Agent side: picks, creates and checks the socket directory for this
 * process's effective uid and writes <dir>/agent-<pid>.sock into buf.
 * GS_E_PERMISSION if a directory is not safe (owner, mode, symlink),
 * GS_E_FAILURE if none can be created or the path is too long.
 */
int gs_ctl_agent_socket_path(char *buf, size_t n, struct gs_err *err);
/*
 * The runtime directory of this process's user (the same choice and checks):
 * agent sockets, records of suspended processes, restore work directories.
 */
int gs_ctl_run_dir(char *buf, size_t n, struct gs_err *err);
/* Creates dir (0700) if missing and checks it belongs to uid with no group/other access. */
int gs_ctl_check_dir(const char *dir, uid_t uid, struct gs_err *err);

/*
 * CLI side: finds the socket of the agent in process pid, following the
 * process's uid, its GPUSNAP_RUN_DIR, its pid namespace (NSpid) and its mount
 * namespace (/proc/<pid>/root). GS_E_AGENT "no agent" if none is there,
 * GS_E_NO_PROCESS / GS_E_PERMISSION for the process itself.
 */
int gs_ctl_find_agent(pid_t pid, char *buf, size_t n, struct gs_err *err);

/* The server's rule: the same uid, or root. */
bool gs_ctl_peer_allowed(uid_t peer, uid_t self);

/*
 * Server: the handler answers one request; it fills reply (already
 * initialised as an empty RESULT; it may change the type, e.g. to INFO). It
 * runs on the connection's thread and may take long (a suspend); several
 * requests may be handled at once, so the handler serializes what must not
 * overlap.
 */
typedef void (*gs_ctl_handler)(void *ctx, const struct gs_msg *req, struct gs_msg *reply);

struct gs_ctl_server;

/*
 * Binds path (replacing a stale socket file there), listens, removes the
 * stale agent sockets beside it and starts the server thread. io_timeout_s
 * bounds how long a client may take to send its request or read the reply
 * (0 = 10 s). The caller owns the server and must stop it.
 */
int gs_ctl_server_start(const char *path, gs_ctl_handler fn, void *ctx, double io_timeout_s,
			struct gs_ctl_server **out, struct gs_err *err);
/* How often, at most, the server looks whether its descriptors are still its own. */
#define GS_CTL_CHECK_MS 500
/*
 * The server's long-lived descriptors as it holds them now: out[0] the
 * listening socket, out[1] the eventfd (-1 for one it lost, or s NULL).
 * Takes no lock and calls nothing but atomic loads: the agent asks it from
 * close_range, which an app may call in a fork child.
 */
void gs_ctl_server_own_fds(const struct gs_ctl_server *s, int out[2]);
/* Stops and frees the server (NULL is fine). Safe while idle or mid-request. */
void gs_ctl_server_stop(struct gs_ctl_server *s);
/*
 * In a fork child (its only thread; an atfork child handler): closes the
 * descriptors inherited from the parent's server s (listening socket,
 * eventfd, connections) and frees s, leaving the parent's socket file and
 * threads alone. A child that kept the listening socket open would accept
 * connections meant for the parent that nobody answers, also after the
 * parent is gone. NULL is fine.
 */
void gs_ctl_server_abandon(struct gs_ctl_server *s);
/*
 * Removes every agent-<pid>.sock in dir whose pid does not exist and on
 * which nobody listens. Returns how many it removed.
 */
int gs_ctl_remove_stale_sockets(const char *dir);

/*
 * Client: connects to path, checks the server is process expect_pid (0 = do
 * not check; the pid as seen from the caller's pid namespace), sends req and
 * waits up to timeout_s for the reply, which is decoded into *reply (free it
 * even on failure). GS_E_AGENT when no agent listens or the exchange breaks,
 * GS_E_PERMISSION when the socket may not be used, GS_E_TIMEOUT when the
 * reply does not come in time.
 */
int gs_ctl_call(const char *path, pid_t expect_pid, struct gs_msg *req, struct gs_msg *reply, double timeout_s,
		struct gs_err *err);
/* How the message of a call to a socket nobody listens on begins (a stale socket: no agent there). */
#define GS_CTL_NOBODY_LISTENS "no agent listening"

/*
 * Several gs_ctl_calls at once, each to its own agent (gpusnap state's list
 * of every CUDA process, which any user can enter): the requests go out
 * together and the replies are awaited by one poll over every socket until
 * one deadline, timeout_s from now, so an agent that accepts and never
 * answers costs the others nothing and the whole takes timeout_s at most.
 * No threads: the sockets are non-blocking. Each call's outcome is what
 * gs_ctl_call would give (GS_E_TIMEOUT: no reply in time, or a backlog that
 * stayed full); free every reply, even on failure.
 */
struct gs_ctl_call_many {
	const char *path;   /* in: the agent's socket */
	pid_t expect_pid;   /* in: as gs_ctl_call's */
	struct gs_msg *req; /* in: the request (finished here) */
	int rc;             /* out */
	struct gs_err err;  /* out, when rc != 0 */
	struct gs_msg reply; /* out */
};
void gs_ctl_call_many(struct gs_ctl_call_many *calls, size_t n, double timeout_s);

/*
 * gs_ctl_call with a descriptor passed along (SCM_RIGHTS with the request's
 * first bytes), e.g. an image directory for an agent in another mount
 * namespace. The caller keeps pass_fd open and closes it.
 */
int gs_ctl_call_fd(const char *path, pid_t expect_pid, struct gs_msg *req, int pass_fd, struct gs_msg *reply,
		   double timeout_s, struct gs_err *err);
/*
 * In a server handler: the descriptor that came with the request this thread
 * handles, now the caller's to close; -1 if none came. One per request; a
 * descriptor the handler does not take is closed after it returns.
 */
int gs_ctl_take_passed_fd(void);

/*
 * Frame I/O on a connected stream socket, for callers that hold a connection.
 * deadline is gs_now() based; stop_fd (or -1) aborts the wait when readable.
 */
int gs_ctl_send(int fd, struct gs_msg *m, double deadline, int stop_fd, struct gs_err *err);
int gs_ctl_recv(int fd, enum gs_peer from, struct gs_msg *m, double deadline, int stop_fd, struct gs_err *err);

#endif
