"""``python -m kernelwright.search._worker FD``: a local evaluation worker serving jobs on the socket ``FD``
(see :class:`kernelwright.search.pool.LocalPool`).

Ctrl-C is the search's to handle (it stops the pool); SIGTERM, the pool's way to stop a busy worker, unwinds
through the evaluator, which kills the candidate's process on the way out."""

import multiprocessing.connection as mpc
import signal
import sys


def _terminate(signum, frame):
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _terminate)
    from kernelwright.search.pool import serve

    serve(mpc.Connection(int(sys.argv[1])))
