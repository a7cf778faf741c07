"""Where a request's time goes on a proxy's serving thread, from its system calls.

Usage: phases.py TRACE UPSTREAM_FDS  (TRACE: `perf script --ns -F tid,time,event,trace` of
`raw_syscalls:sys_enter,raw_syscalls:sys_exit` on that one thread; UPSTREAM_FDS: the fds of its
connections to the upstream, in decimal, comma-separated. The upstream's is the one of them the
thread writes to most often, the client's the other fd it reads most often.)

Prints one JSON object: for each phase, its sample count, mean and percentiles (50, 90, 99) in µs.

- `woken`: from the return of the `epoll_wait` that brought the client's request to the start of
  the read that takes it (the runtime and the connection's code finding the ready socket);
- `to_upstream`: from the end of the read that brought the client's request to the start of
  the write that sends it upstream (reading, routing and preparing the request);
- `to_client`: from the end of the read that brought the upstream's answer to the start of the
  write that answers the client (reading the answer and preparing the response);
- `after_answer`: from the end of the write that answered the client to the thread's next wait
  in `epoll_wait` (what the thread does once the client has its answer);
- `upstream_write`, `client_write`: the two writes themselves (on loopback a write also runs
  the receiver's TCP processing and wakes it);
- `upstream_wait`: from the end of the upstream write to the end of the read that brought the
  answer: the upstream's own time, and the thread's waking when the answer is there.

What is left is the thread waiting for the client's next request.
"""

import json
import re
import sys

# System call numbers of x86-64 Linux.
READS = {0, 45}  # read, recvfrom
WRITES = {1, 20, 44}  # write, writev, sendto
EPOLL_WAIT = {232, 281}  # epoll_wait, epoll_pwait

LINE = re.compile(r"\s*\d+\s+([\d.]+):\s+raw_syscalls:sys_(enter|exit): NR (\d+) (.*)")


def events(path):
    for line in open(path):
        m = LINE.match(line)
        if not m:
            continue
        at = float(m.group(1)) * 1e6
        nr = int(m.group(3))
        if m.group(2) == "enter":
            fd = int(m.group(4).strip("()").split(", ")[0], 16)
            yield at, "enter", nr, fd
        else:
            yield at, "exit", nr, int(m.group(4).split("=")[1])


def phases(path, client, upstream):
    phases_in_order = ("woken", "to_upstream", "upstream_write", "upstream_wait", "to_client", "client_write", "after_answer")
    out = {k: [] for k in phases_in_order}
    entered = None  # (time, nr, fd) of the call in progress
    last_read = None  # (fd, end time) of the last read that returned data
    answered_at = None
    sent_at = None  # end of the last upstream write
    polled_at = None  # return of the last epoll_wait, while no request has been read since
    for at, kind, nr, value in events(path):
        if kind == "enter":
            entered = (at, nr, value)
            if nr in EPOLL_WAIT and answered_at is not None:
                out["after_answer"].append(at - answered_at)
                answered_at = None
            continue
        if entered is None or entered[1] != nr:
            continue
        began, _, fd = entered
        entered = None
        if nr in EPOLL_WAIT and value > 0:
            polled_at = at
        if nr in READS and fd == client and polled_at is not None:
            if value > 0:
                out["woken"].append(began - polled_at)
            polled_at = None
        if nr in READS and value > 0:
            last_read = (fd, at)
            if fd == upstream and sent_at is not None:
                out["upstream_wait"].append(at - sent_at)
                sent_at = None
        elif nr in WRITES:
            if last_read is not None:
                read_fd, read_end = last_read
                if read_fd == client and fd == upstream:
                    out["to_upstream"].append(began - read_end)
                elif read_fd == upstream and fd == client:
                    out["to_client"].append(began - read_end)
            last_read = None
            if fd == upstream:
                out["upstream_write"].append(at - began)
                sent_at = at
            elif fd == client:
                out["client_write"].append(at - began)
                answered_at = at
    summary = {}
    for name, values in out.items():
        values.sort()
        n = len(values)
        if n == 0:
            summary[name] = {"n": 0}
            continue
        summary[name] = {
            "n": n,
            "mean": round(sum(values) / n, 2),
            "p50": round(values[n // 2], 2),
            "p90": round(values[min(n - 1, n * 9 // 10)], 2),
            "p99": round(values[min(n - 1, n * 99 // 100)], 2),
        }
    return summary


def most_used(path, calls, among=None, besides=None):
    """The fd the trace enters `calls` on most often, of `among` (any when None), not `besides`."""
    count = {}
    for _, kind, nr, fd in events(path):
        if kind == "enter" and nr in calls and fd != besides and (among is None or fd in among):
            count[fd] = count.get(fd, 0) + 1
    return max(count, key=count.get) if count else -1


if __name__ == "__main__":
    trace = sys.argv[1]
    upstream = most_used(trace, WRITES, among={int(fd) for fd in sys.argv[2].split(",")})
    print(json.dumps(phases(trace, most_used(trace, READS, besides=upstream), upstream)))
