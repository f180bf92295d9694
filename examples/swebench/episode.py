#!/usr/bin/env python3
"""A SWE-bench-style episode with gvx's Python client against gvx serve.

The same episode as episode.mjs: a sandbox from the "swebench" template,
then for each candidate patch: apply it, run the tests, read the result,
and go back to the start (rollback to a checkpoint, or reset to the
template where the service cannot checkpoint). Standard library only:

    PYTHONPATH=../../clients/python E2B_API_URL=http://127.0.0.1:7820 \\
    E2B_API_KEY=e2b_... python3 episode.py
"""

import os
import re
import sys
import time

from gvx_client import Client, NotImplementedByServer

HERE = os.path.dirname(os.path.abspath(__file__))


def summary(out):
    ran = re.search(r"Ran (\d+) tests?", out)
    failed = re.search(r"FAILED \((.*)\)", out)
    return "%s tests, %s" % (ran.group(1) if ran else "?", failed.group(1) if failed else "all passed")


def main():
    client = Client()
    patches = sorted(f for f in os.listdir(os.path.join(HERE, "patches")) if f.endswith(".diff"))
    t0 = time.monotonic()
    sb = client.create("swebench", timeout=600)
    print("sandbox %s up in %.0f ms" % (sb.sandbox_id, (time.monotonic() - t0) * 1000))
    start = None
    try:
        start = sb.checkpoint()
        print("checkpoint %s" % start)
    except NotImplementedByServer as e:
        print("no checkpoint (%s); going back by resetting to the template" % e)
    solved = None
    try:
        r = sb.run("cd ~/repo && python3 -m unittest 2>&1")
        print("before any patch: exit %d, %s" % (r.exit_code, summary(r.stdout)))
        for p in patches:
            t1 = time.monotonic()
            with open(os.path.join(HERE, "patches", p)) as f:
                sb.write("/tmp/candidate.diff", f.read())
            r = sb.run("cd ~/repo && patch -p1 < /tmp/candidate.diff >/dev/null && python3 -m unittest 2>&1")
            print("%s: exit %d, %s (%.0f ms)" % (p, r.exit_code, summary(r.stdout), (time.monotonic() - t1) * 1000))
            if r.exit_code == 0:
                solved = p
                break
            t2 = time.monotonic()
            if start:
                sb.rollback(start)
            else:
                sb.reset()
            if b"s[mid + 1]" in sb.read("/home/user/repo/calc/__init__.py"):
                raise SystemExit("the sandbox still has the rejected patch")
            print("  back to the start (%s) in %.0f ms" % ("rollback" if start else "reset", (time.monotonic() - t2) * 1000))
    finally:
        sb.kill()
    print("solved by %s" % solved if solved else "no patch solved the issue")
    return 0 if solved else 1


if __name__ == "__main__":
    sys.exit(main())
