/*
 * fd_passing.h - one file descriptor over a Unix socket (SCM_RIGHTS), for the
 * test apps whose ranks hand each other exported GPU memory as NCCL does:
 * tests/agent/share_app.c (C, fake driver) and tests/gpu/apps/share.cu (CUDA
 * C++). Plain C that compiles as C++ too.
 */
#ifndef GPUSNAP_TESTS_FD_PASSING_H
#define GPUSNAP_TESTS_FD_PASSING_H

#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

/* Room for one descriptor's control message, aligned as one. */
union fd_control {
	char buf[CMSG_SPACE(sizeof(int))];
	struct cmsghdr align;
};

/* The one-byte message both ends use: byte as its data, c as its control buffer. */
static inline void fd_message(struct msghdr *mh, struct iovec *iov, char *byte, union fd_control *c)
{
	iov->iov_base = byte;
	iov->iov_len = 1;
	memset(mh, 0, sizeof(*mh));
	mh->msg_iov = iov;
	mh->msg_iovlen = 1;
	mh->msg_control = c->buf;
	mh->msg_controllen = sizeof(c->buf);
}

/* Sends fd over sock with a one-byte message; 0, or -1 (errno) when it did not go. */
static inline int test_send_fd(int sock, int fd)
{
	char byte = 'F';
	union fd_control c;
	memset(&c, 0, sizeof(c));
	struct iovec iov;
	struct msghdr mh;
	fd_message(&mh, &iov, &byte, &c);
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	return sendmsg(sock, &mh, 0) == 1 ? 0 : -1;
}

/* The descriptor test_send_fd sent over sock; -1 when none came. */
static inline int test_recv_fd(int sock)
{
	char byte;
	union fd_control c;
	struct iovec iov;
	struct msghdr mh;
	fd_message(&mh, &iov, &byte, &c);
	if (recvmsg(sock, &mh, 0) != 1)
		return -1;
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	if (!cm || cm->cmsg_type != SCM_RIGHTS)
		return -1;
	int fd;
	memcpy(&fd, CMSG_DATA(cm), sizeof(int));
	return fd;
}

#endif
