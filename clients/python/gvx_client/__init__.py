"""A standard-library client for gvx serve.

gvx serve speaks E2B's API, so the official ``e2b`` packages cover its E2B
part (configure them with E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY).
This client covers what E2B lacks -- templates, reset, checkpoint, rollback,
fork, release -- and, so that a Python program needs nothing beyond the
standard library, the few E2B calls an episode needs: create, run a
command, write and read files, kill.

    from gvx_client import Client
    c = Client()                       # GVX_API_URL / E2B_API_URL, E2B_API_KEY
    sb = c.create("swebench")
    r = sb.run("python3 -m unittest")
    print(r.exit_code, r.stdout)
    sb.kill()
"""

from .client import (  # noqa: F401
    Client,
    CommandResult,
    GvxError,
    NotImplementedByServer,
    Sandbox,
)

__all__ = ["Client", "CommandResult", "GvxError", "NotImplementedByServer", "Sandbox"]
