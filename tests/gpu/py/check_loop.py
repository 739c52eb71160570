"""check_loop.py - the command loop the Python GPU test apps share.

serve(check, tag) prints "READY <pid>", then answers one command per stdin
line, like the C test apps:
  check  -> check() returns the list of what differs: "CHECK OK <tag>" when
            it is empty, else "CHECK FAIL <what>; <what>..." (and the exit
            status becomes 1)
  quit   -> "BYE <status>", and serve returns status
Other commands go to commands[name]() when given, else "ERROR unknown command".
"""
import os
import sys


def serve(check, tag, commands=None):
    print("READY %d" % os.getpid(), flush=True)
    status = 0
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "check":
            why = check()
            if why:
                status = 1
                print("CHECK FAIL " + "; ".join(why), flush=True)
            else:
                print("CHECK OK %s" % tag, flush=True)
        elif commands and cmd in commands:
            commands[cmd]()
        elif cmd == "quit":
            break
        elif cmd:
            print("ERROR unknown command %r" % cmd, flush=True)
    print("BYE %d" % status, flush=True)
    return status
