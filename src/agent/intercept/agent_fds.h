/*
 * agent_fds.h - the agent's own descriptors kept through an app's mass
 * close: close_range(2) and closefrom(3) are interposed and close every
 * descriptor asked for except the control server's listening socket and
 * eventfd and the agent's log. Daemons, sandboxes and some launchers close
 * "everything above 2" at their start, which used to take the agent's
 * control socket with it (the socket file stayed, nobody listened, and
 * gpusnap fell back to the driver path). An app that closes them another way
 * (close() in a loop, the raw system call) is caught by the control server
 * itself, which listens anew (core/control_socket.h).
 *
 * The interposed functions are async-signal-safe and take no lock: apps call
 * them in fork children between fork and exec (Python's subprocess does),
 * where a lock held by another thread of the parent is never released.
 */
#ifndef GPUSNAP_AGENT_FDS_H
#define GPUSNAP_AGENT_FDS_H

struct gs_ctl_server;

/* The server whose descriptors to keep (NULL: none, before it is stopped or abandoned). */
void gs_agent_fds_set_server(struct gs_ctl_server *s);
/* The agent's log descriptor (-1: none, the log goes to the app's stderr). */
void gs_agent_fds_set_log(int fd);
/* Resolves libc's closefrom, the fallback on kernels without close_range; call once at load. */
void gs_agent_fds_init(void);

#endif
